"""A Tinker server on the tiny model for the whole session, and the official SDK pointed at it."""

import pytest

tinker = pytest.importorskip("tinker")

from trivium.tinker_server.server import build_state, serve_in_thread

BASE_MODEL = "tiny"
SDK_KEY = "tml-local"  # the SDK insists on a key that looks like one, even when the server checks none


@pytest.fixture(scope="session")
def tinker_url(tiny_model_dir, tmp_path_factory):
    state = build_state(
        [f"{BASE_MODEL}={tiny_model_dir}"], str(tmp_path_factory.mktemp("tinker_checkpoints"))
    )
    with serve_in_thread(state) as url:
        yield url


@pytest.fixture(scope="session")
def service_client(tinker_url):
    client = tinker.ServiceClient(base_url=tinker_url, api_key=SDK_KEY)
    yield client
    client.close("success").result()


@pytest.fixture
def training_client(service_client):
    return service_client.create_lora_training_client(base_model=BASE_MODEL, rank=8, seed=0).result()
