"""Settings of the example shop: a Django project whose tasks run on venturi.

The database comes from the environment (``SHOP_DB_NAME``, ``SHOP_DB_HOST``...) so
that a worker started by the tests reaches the test runner's database.
"""

import os

SECRET_KEY = os.environ.get("SHOP_SECRET_KEY", "example-only-not-a-secret")
DEBUG = os.environ.get("SHOP_DEBUG") == "1"
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "testserver"]

INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "venturi.contrib.django",  # manage.py venturi_worker, manage.py venturi, the tables
    "shop",
]
MIDDLEWARE = ["django.middleware.common.CommonMiddleware"]
ROOT_URLCONF = "shop.urls"
TEMPLATES = [{"BACKEND": "django.template.backends.django.DjangoTemplates", "APP_DIRS": True}]

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": os.environ.get("SHOP_DB_NAME", "shop"),
        "USER": os.environ.get("SHOP_DB_USER", "root"),
        "PASSWORD": os.environ.get("SHOP_DB_PASSWORD", ""),
        "HOST": os.environ.get("SHOP_DB_HOST", "127.0.0.1"),
        "PORT": os.environ.get("SHOP_DB_PORT", "5432"),
        "TEST": {"NAME": os.environ.get("SHOP_TEST_DB_NAME")},
    }
}

# --8<-- [start:tasks]
TASKS = {
    "default": {
        "BACKEND": "venturi.contrib.django.VenturiBackend",
        "QUEUES": ["default", "emails"],
        "OPTIONS": {
            "prefix": os.environ.get("SHOP_VENTURI_PREFIX", "venturi_"),
            "max_failures": 1,  # Django's semantics: a raising task is FAILED after one run
        },
    }
}
# --8<-- [end:tasks]

USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
