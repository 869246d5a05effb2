"""`jacobigen serve --model lumina2:DIR` on a tiny Lumina-mGPT 2.0 checkpoint in the released layout:
it starts (its MoVQGAN codes start at id 155000, so the server cannot learn the image size from a
grid of zeros: issue 61) and serves an image of the size it announces."""

from jacobigen.serve.app import Settings, create_app
from jacobigen.serve.server import load
from tests.helpers import lumina2_models as lm
from tests.helpers.need import need

from .live import call, pixels, running

need("transformers")


def test_a_lumina2_checkpoint_is_served(tmp_path):
    lm.write_checkpoint(tmp_path, lm.chameleon(theta=5e5), lm.movq())
    bundle = load(f"lumina2:{tmp_path}?size=256", Settings(threads=1))
    with running(create_app(bundle, Settings(max_batch=1))) as url:
        status, models, _ = call(f"{url}/v1/models")
        size = models["data"][0]["size"]
        assert status == 200 and size == "256x256", models
        status, answer, _ = call(f"{url}/v1/images/generations", {"prompt": "a red cat", "method": "ar", "size": size})
    assert status == 200, answer
    assert pixels(answer["data"][0]["b64_json"]).shape[:2] == (256, 256)
