"""The KServe ``InferenceService`` manifest of ``docs/deployment.md`` against KServe's own CRD
schema (``tests/data/kserve/inferenceservice-v1beta1.schema.json``: the v1beta1 OpenAPI schema of
``config/crd/full/serving.kserve.io_inferenceservices.yaml``, trimmed by ``trim_crd.py`` beside it):
its required fields, its keys (an unknown one would be pruned by the cluster without a word) and
its quantities; and that it serves the model ``ptmkit export-triton`` writes in the same page."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest

jsonschema = pytest.importorskip("jsonschema")
yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "deployment.md"
SCHEMA = json.loads((ROOT / "tests" / "data" / "kserve" / "inferenceservice-v1beta1.schema.json").read_text(encoding="utf-8"))
#: Kubernetes' object names for a Knative-backed service: a DNS-1035 label.
DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


@pytest.fixture(scope="module")
def manifest() -> dict:
    """The YAML block of the page's KServe section."""
    section = PAGE.read_text(encoding="utf-8").split("### On Kubernetes with KServe", 1)[1]
    block = re.search(r"```yaml\n(.*?)```", section, re.S)
    assert block, "no yaml block in docs/deployment.md's KServe section"
    return yaml.safe_load(block.group(1))


def errors(document: dict) -> list[str]:
    validator = jsonschema.Draft7Validator(SCHEMA)
    return sorted(f"{'/'.join(map(str, error.absolute_path))}: {error.message}" for error in validator.iter_errors(document))


def test_manifest_is_a_valid_inference_service(manifest: dict) -> None:
    crd = SCHEMA["x-crd"]
    assert manifest["apiVersion"] == f"{crd['group']}/{crd['version']}" and manifest["kind"] == crd["kind"]
    assert errors(manifest) == []
    assert DNS_1035.match(manifest["metadata"]["name"]) and len(manifest["metadata"]["name"]) <= 63
    model = manifest["spec"]["predictor"]["model"]
    assert model["modelFormat"]["name"] == "triton" and model["protocolVersion"] == "v2"
    assert re.match(r"^(s3|gs|pvc|https?)://", model["storageUri"])


def test_the_schema_catches_what_a_cluster_would_refuse_or_drop(manifest: dict) -> None:
    """The check can fail: a missing predictor, a misspelled key, a bad quantity, no model format name."""
    cases = {
        "spec: 'predictor' is a required property": lambda m: m["spec"].pop("predictor"),
        "storageURI": lambda m: m["spec"]["predictor"]["model"].__setitem__("storageURI", m["spec"]["predictor"]["model"].pop("storageUri")),
        "spec/predictor/model/resources/limits/memory": lambda m: m["spec"]["predictor"]["model"]["resources"]["limits"].__setitem__("memory", "4 GB"),
        "'name' is a required property": lambda m: m["spec"]["predictor"]["model"]["modelFormat"].pop("name"),
    }
    for expected, breaks in cases.items():
        broken = copy.deepcopy(manifest)
        breaks(broken)
        found = errors(broken)
        assert any(expected in error for error in found), (expected, found)


def test_manifest_serves_the_page_s_triton_model(manifest: dict) -> None:
    """The service's model is the one the page's ``ptmkit export-triton ... --name`` writes, and the
    page's request path names it."""
    page = PAGE.read_text(encoding="utf-8")
    name = re.search(r"ptmkit export-triton \S+ models/ --name (\S+)", page).group(1)
    assert manifest["metadata"]["name"] == name and f"/v2/models/{name}/infer" in page
