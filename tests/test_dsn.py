"""DSN handling at the connection boundary: misconfiguration is not an outage."""

from __future__ import annotations

import pytest

import venturi


async def test_keyword_dsn_is_a_config_error_with_the_password_masked() -> None:
    with pytest.raises(venturi.ConfigError) as err:
        async with venturi.Queue.connect("host=localhost password=s3cret"):
            pass
    message = str(err.value)
    assert "invalid DSN" in message and "s3cret" not in message and "\n" not in message


async def test_empty_dsn_says_where_to_set_it() -> None:
    with pytest.raises(venturi.ConfigError, match="VENTURI_DSN"):
        async with venturi.Queue.connect(""):
            pass
