"""WebShop settings (env vars ``SKILLOS_WEBSHOP_*``); the data directory itself is ``SKILLOS_WEBSHOP_DATA``."""

from __future__ import annotations

from skillos.settings import EnvDataSettings


class WebShopSettings(EnvDataSettings):
    # file names inside the data directory; empty: the first found of the known names
    # (items_shuffle_1000.json, items_shuffle_1000.reconstructed.json, items_shuffle.json; ...)
    webshop_products_file: str = ""
    webshop_attributes_file: str = ""
    webshop_human_goals_file: str = ""
    # keep only the first N products of the product file (WebShop's 100/1k/100k subsets); 0: all
    webshop_num_products: int = 0
