"""The WebShop text environment: search and click through a 1,000-product (or full) shop, buy once.

    env = WebShopEnvironment(Path("../shared/data/webshop"))
    task = env.tasks("test")[0]
    game = env.open(task)
    game.start().observation   # "WebShop [SEP] Instruction: [SEP] i need ... [SEP] Search"
    game.step("search[red cotton t-shirt]")
    game.step("click[b09abc1234]"); game.step("click[large]"); game.step("click[buy now]")
    # -> done, reward in [0, 1], info["score"] = 100 * reward

Pages and transitions follow WebShop's text environment. An action it would ignore (malformed, or a
click on something not on the page) returns the page unchanged with info["invalid"] = True.
WebShop accepts search[...] on every page, not only on the search page; so do we.
"""

from __future__ import annotations

import random
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from services.envs.base import Environment, Game, StepResult, TaskInfo
from services.envs.webshop.catalog import (
    PRICE_SEED,
    Catalog,
    CatalogFiles,
    Product,
    build_catalog,
    purchase_prices,
)
from services.envs.webshop.goals import Goal, human_goals, split_goals, synthetic_goals
from services.envs.webshop.pages import (
    BACK_TO_SEARCH,
    BUY_NOW,
    NEXT_PAGE,
    PREV_PAGE,
    RESULTS_PER_PAGE,
    SUB_PAGES,
    Clickable,
    done_page,
    item_page,
    results_page,
    search_page,
    sub_page,
)
from services.envs.webshop.reward import is_warm, purchase_reward, warm_up_in_background
from services.envs.webshop.search import BM25Index
from services.envs.webshop.settings import WebShopSettings
from skillos.logging import get_logger

log = get_logger(__name__)

SEARCH_RESULTS = 50
MAX_QUERY_CHARS = 1000  # longer search[...] arguments are refused as invalid
_ACTION = re.compile(r"^\s*(search|click)\[(.*)\]\s*$", re.DOTALL)


@dataclass(frozen=True)
class ShopData:
    """Everything games read, built once per process and never changed afterwards."""

    catalog: Catalog
    index: BM25Index
    splits: Mapping[str, tuple[Goal, ...]]
    tasks: Mapping[str, tuple[TaskInfo, ...]]
    goal_by_task: Mapping[str, Goal]
    task_by_id: Mapping[str, TaskInfo]

    def search(self, query: str, k: int = SEARCH_RESULTS) -> list[Product]:
        return [self.catalog.products[i] for i in self.index.search(query, k)]


_cache: dict[tuple, ShopData] = {}
_cache_lock = threading.Lock()


def task_id(split: str, index: int) -> str:
    # "webshop-<i>" is WebShop's goal index (its `session` number): test i, train 500 + i
    if split == "human":
        return f"webshop-human-{index}"
    return f"webshop-{index + (500 if split == 'train' else 0)}"


def load_shop(files: CatalogFiles, num_products: int | None = None) -> ShopData:
    """Load (once per process and file set) the catalog, search index and goals."""
    key = (files, num_products)
    with _cache_lock:
        if key in _cache:
            return _cache[key]
        catalog = build_catalog(files, num_products)
        index = BM25Index([p.search_text for p in catalog.products])

        def goal_rng() -> random.Random:
            # the price stream as it stands after the purchase prices were drawn
            rng = random.Random(PRICE_SEED)
            purchase_prices(catalog.products, rng)
            return rng

        splits = split_goals(synthetic_goals(catalog, goal_rng()), human_goals(catalog, goal_rng()))
        tasks: dict[str, tuple[TaskInfo, ...]] = {}
        goal_by_task: dict[str, Goal] = {}
        task_by_id: dict[str, TaskInfo] = {}
        for split, goals in splits.items():
            infos = []
            for i, goal in enumerate(goals):
                info = TaskInfo(
                    id=task_id(split, i), type=goal.category, instruction=goal.instruction_text, split=split
                )
                infos.append(info)
                goal_by_task[info.id] = goal
                task_by_id[info.id] = info
            tasks[split] = tuple(infos)
        data = ShopData(
            catalog, index, {s: tuple(g) for s, g in splits.items()}, tasks, goal_by_task, task_by_id
        )
        log.info(
            "webshop.loaded",
            products=len(catalog.products),
            files=str(files.products),
            **{f"goals_{s}": len(g) for s, g in splits.items()},
        )
        _cache[key] = data
        return data


class WebShopEnvironment(Environment):
    name = "webshop"
    max_episode_steps = 15  # GiGPO / verl-agent's WebShop episode length

    def __init__(
        self,
        data_dir: Path | None = None,
        *,
        products_file: str | None = None,
        attributes_file: str | None = None,
        human_goals_file: str | None = None,
        num_products: int | None = None,
    ):
        settings = WebShopSettings()
        data_dir = Path(data_dir) if data_dir is not None else settings.webshop_data
        self.data_dir = data_dir
        self.files = CatalogFiles.in_dir(
            data_dir,
            products_file or settings.webshop_products_file or None,
            attributes_file or settings.webshop_attributes_file or None,
            human_goals_file or settings.webshop_human_goals_file or None,
        )
        self.data = load_shop(self.files, num_products or settings.webshop_num_products or None)
        warm_up_in_background()

    def warming_up(self) -> str | None:
        return None if is_warm() else "loading spaCy for the purchase reward"

    def splits(self) -> list[str]:
        return list(self.data.tasks)

    def tasks(self, split: str) -> list[TaskInfo]:
        if split not in self.data.tasks:
            raise KeyError(f"unknown split {split!r}; WebShop serves {', '.join(self.data.tasks)}")
        return list(self.data.tasks[split])

    def task(self, task_id: str) -> TaskInfo:
        info = self.data.task_by_id.get(task_id)
        if info is None:
            raise KeyError(f"unknown WebShop task {task_id!r}")
        return info

    def goal(self, task: TaskInfo) -> Goal:
        return self.data.goal_by_task[task.id]

    def open(self, task: TaskInfo, *, expert: bool = False, seed: int | None = None) -> Game:
        return WebShopGame(self.data, task, self.data.goal_by_task[task.id], expert=expert)


class WebShopGame(Game):
    def __init__(self, data: ShopData, task: TaskInfo, goal: Goal, *, expert: bool = False):
        self.task = task
        self.goal = goal
        self._data = data
        self._expert = expert
        self._lock = threading.Lock()  # one step at a time, whatever the caller does
        self._keywords: str | None = None
        self._results: list[Product] = []
        self._page_no = 1
        self._product: Product | None = None
        self._options: dict[str, str] = {}
        self._done = False
        self._page = search_page(goal.instruction_text)

    # --- Game interface ---

    def start(self) -> StepResult:
        with self._lock:
            self._to_search_page()
            return self._result(0.0, {})

    def step(self, action: str) -> StepResult:
        with self._lock:
            if self._done:
                return self._invalid("the episode is over: the product was bought")
            m = _ACTION.match(action) if isinstance(action, str) else None
            if m is None:
                return self._invalid("actions are search[<query>] or click[<one of the listed buttons>]")
            verb, arg = m.group(1), m.group(2).strip().lower()
            if verb == "search":
                if not arg:
                    return self._invalid("search[...] needs a query")
                if len(arg) > MAX_QUERY_CHARS:
                    return self._invalid(f"search queries are limited to {MAX_QUERY_CHARS} characters")
                self._search(arg, 1)
                return self._result(0.0, {})
            target = self._page.clickables.get(arg)
            if target is None:
                return self._invalid(f"{arg!r} is not clickable on this page")
            return self._click(arg, target)

    # --- transitions ---

    def _click(self, label: str, target: Clickable) -> StepResult:
        name = self._page.name
        if label == BUY_NOW:
            return self._buy()
        if label == BACK_TO_SEARCH:
            self._to_search_page()
        elif label == NEXT_PAGE and name == "results":
            self._search(self._keywords or "", self._page_no + 1)
        elif label == PREV_PAGE and name == "results":
            self._search(self._keywords or "", self._page_no - 1)
        elif label == PREV_PAGE and name in SUB_PAGES.values():
            self._show_item()
        elif label == PREV_PAGE and name == "item":
            self._search(self._keywords or "", self._page_no)
        elif label in SUB_PAGES:
            assert self._product is not None
            self._page = sub_page(self.goal.instruction_text, self._product, SUB_PAGES[label])
        elif target.kind == "product":
            self._product = self._data.catalog.by_asin[target.value]
            self._show_item()
        elif target.kind == "option":
            self._options[target.value] = label
            self._show_item()
        return self._result(0.0, {})

    def _to_search_page(self) -> None:
        self._keywords, self._results, self._page_no = None, [], 1
        self._product, self._options = None, {}
        self._page = search_page(self.goal.instruction_text)

    def _search(self, keywords: str, page_no: int) -> None:
        if keywords != self._keywords:
            self._results = self._data.search(keywords)
        self._keywords, self._page_no = keywords, page_no
        # a results page forgets the product and options chosen before, as in WebShop
        self._product, self._options = None, {}
        self._page = results_page(self.goal.instruction_text, self._results, page_no)

    def _show_item(self) -> None:
        assert self._product is not None
        self._page = item_page(self.goal.instruction_text, self._product)

    def _buy(self) -> StepResult:
        product = self._product
        assert product is not None  # "buy now" is only on item pages
        price = self._data.catalog.prices[product.asin]
        reward = purchase_reward(product, price, self._options, self.goal)
        self._done = True
        self._page = done_page(product.asin, self._options, reward.value)
        info = {
            "score": reward.score,
            "purchased": {"asin": product.asin, "options": dict(self._options), "price": price},
            "goal_asin": self.goal.asin,
            "reward_details": reward.details,
        }
        return self._result(reward.value, info)

    # --- results ---

    def _result(self, reward: float, info: dict) -> StepResult:
        info = {"invalid": False, "page": self._page.name, **info}
        if self._done:
            info.setdefault("score", 100.0 * reward)
        elif self._expert:
            info["expert_action"] = self._expert_action()
        return StepResult(
            observation=self._page.text,
            reward=reward,
            done=self._done,
            # WebShop counts an episode as a success only at the full reward
            won=self._done and reward >= 1.0,
            admissible_actions=self._page.admissible_actions(),
            info=info,
        )

    def _invalid(self, why: str) -> StepResult:
        r = self._result(0.0, {})
        r.info.update(invalid=True, reason=why)
        return r

    def _expert_action(self) -> str | None:
        """A scripted shopper who knows the goal: search its instruction, page through the results
        to the goal product, pick the goal options, buy. None when the search misses the product."""
        goal, page = self.goal, self._page
        if page.name == "search":
            return f"search[{search_query(goal)}]"
        if page.name == "results":
            if goal.asin.lower() in page.clickables:
                return f"click[{goal.asin.lower()}]"
            in_results = any(p.asin == goal.asin for p in self._results)
            if (
                in_results
                and NEXT_PAGE in page.clickables
                and self._page_no * RESULTS_PER_PAGE < len(self._results)
            ):
                return f"click[{NEXT_PAGE}]"
            return None
        if page.name in SUB_PAGES.values():
            return f"click[{PREV_PAGE}]"
        if page.name == "item":
            if self._product is None or self._product.asin != goal.asin:
                return f"click[{PREV_PAGE}]"
            for value in wanted_option_values(goal):
                if value in page.clickables and self._options.get(page.clickables[value].value) != value:
                    return f"click[{value}]"
            return f"click[{BUY_NOW}]"
        return None


def search_query(goal: Goal) -> str:
    """The instruction without its option and price tails: what a careful shopper would type."""
    text = goal.instruction_text
    cut = text.find(", and price lower than")
    if cut > 0:
        text = text[:cut]
    if isinstance(goal.goal_options, Mapping) and goal.goal_options:
        tail = " with " + ", and ".join(f"{k}: {v}" for k, v in goal.goal_options.items())
        text = text.removesuffix(tail)
    return text.strip()


def wanted_option_values(goal: Goal) -> list[str]:
    opts = goal.goal_options
    return list(opts.values()) if isinstance(opts, Mapping) else list(opts)
