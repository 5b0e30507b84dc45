"""The ARM emulator and the provider under test (defined with the provider's tests) for every module here."""

from tests.activities.azure.test_provider import arm, client_options, world

__all__ = ["arm", "client_options", "world"]
