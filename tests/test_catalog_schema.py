"""The typed catalog entries: bundled entries validate, inline ones fail in one line."""

from __future__ import annotations

import json
import math

import pytest

from specsim.cost_models.catalog import (
    get_hardware,
    get_model,
    get_quant,
    hardware_catalog,
    model_catalog,
    quant_catalog,
)
from specsim.cost_models.catalog_schema import (
    Catalogs,
    HardwareEntry,
    ModelEntry,
    QuantAlias,
    QuantEntry,
    catalog_json_schema,
)
from specsim.cost_models.errors import CatalogError
from specsim.simulator.cli import main


def _error(fn, *args) -> str:
    with pytest.raises(CatalogError) as info:
        fn(*args)
    message = str(info.value)
    assert "\n" not in message, message
    return message


def test_every_bundled_entry_validates():
    for entry in hardware_catalog().values():
        HardwareEntry.model_validate(entry)
    for entry in model_catalog().values():
        ModelEntry.model_validate(entry)
    for entry in quant_catalog().values():
        (QuantAlias if "alias" in entry else QuantEntry).model_validate(entry)
    Catalogs.model_validate({"hardware": hardware_catalog(), "models": model_catalog(),
                             "quantization": quant_catalog()})
    for name in hardware_catalog():
        get_hardware(name)
    for name in model_catalog():
        get_model(name)
    for name in quant_catalog():
        get_quant(name, "q")


def _hw(**changes):
    return {**hardware_catalog()["H100-SXM"], **changes}


def _model(**changes):
    return {**model_catalog()["Qwen3-8B"], **changes}


def test_unknown_inline_keys_are_one_line_with_a_hint():
    msg = _error(get_hardware, _hw(hbm_gbs=80))
    assert msg.startswith("hardware.accelerator.hbm_gbs: unknown key (did you mean 'hbm_gb'?")
    msg = _error(get_hardware, _hw(interconnect={"bw_gb_s": 1, "latency_us": 1, "nam": "x"}))
    assert msg.startswith("hardware.accelerator.interconnect.nam: unknown key (did you mean")
    msg = _error(get_model, _model(n_layer=3))
    assert msg.startswith("model.n_layer: unknown key (did you mean 'n_layers'?")
    msg = _error(get_model, _model(hidden_sise=3), "speculation.drafter")
    assert msg.startswith("speculation.drafter.hidden_sise: unknown key (did you mean")
    moe = {"n_experts": 8, "top_k": 2, "expert_intermediate_size": 64, "topk": 2}
    msg = _error(get_model, _model(moe=moe))
    assert msg.startswith("model.moe.topk: unknown key (did you mean 'top_k'?")


@pytest.mark.parametrize("changes,expect", [
    ({"hbm_gb": math.nan}, "hardware.accelerator.hbm_gb: expected a finite number, got nan"),
    ({"hbm_gb": -80}, "hardware.accelerator.hbm_gb: expected a number at least 1e-06, got -80"),
    ({"hbm_gb": "80"}, "hardware.accelerator.hbm_gb: expected a number, got '80'"),
    ({"hbm_bw_gb_s": 1e300}, "hardware.accelerator.hbm_bw_gb_s: expected a number at most"),
    ({"hbm_bw_gb_s": 1e-300}, "hardware.accelerator.hbm_bw_gb_s: expected a number at least"),
    ({"peak_tflops": {"bf16": math.inf}},
     "hardware.accelerator.peak_tflops.bf16: expected a finite number, got inf"),
    ({"peak_tflops": {"fp8": 1}}, "hardware.accelerator.peak_tflops.bf16: required key is missing"),
    ({"peak_tflops": 5}, "hardware.accelerator.peak_tflops: expected a mapping, got int"),
    ({"power_w": {"idle": 900, "max": 700}},
     "hardware.accelerator.power_w.idle: expected at most power_w.max (700), got 900"),
    ({"interconnect": {"bw_gb_s": 1, "latency_us": -1}},
     "hardware.accelerator.interconnect.latency_us: expected a number at least 0, got -1"),
    ({"price_usd_per_hour": True},
     "hardware.accelerator.price_usd_per_hour: expected a number, got True"),
    ({"kind": "npu"}, "hardware.accelerator.kind: expected one of gpu, tpu, ppu, cpu"),
    ({"source": 3}, "hardware.accelerator.source: expected a string, got 3"),
])
def test_bad_accelerator_values_name_the_dotted_key(changes, expect):
    assert _error(get_hardware, _hw(**changes)).startswith(expect)


@pytest.mark.parametrize("changes,expect", [
    ({"n_layers": math.nan}, "model.n_layers: expected a finite number, got nan"),
    ({"n_layers": -2}, "model.n_layers: expected an integer at least 1, got -2"),
    ({"hidden_size": 4096.5}, "model.hidden_size: expected an integer, got 4096.5"),
    ({"params_b": math.nan}, "model.params_b: expected a finite number, got nan"),
    ({"intermediate_size": 0}, "model.intermediate_size: expected an integer at least 1, got 0"),
    ({"n_kv_heads": 5}, "model.n_kv_heads: expected a divisor of n_heads"),
    ({"tied_embeddings": "yes"}, "model.tied_embeddings: expected true or false, got 'yes'"),
    ({"moe": {"n_experts": 4, "top_k": 8, "expert_intermediate_size": 64}},
     "model.moe.top_k: expected 1..n_experts, got 8"),
    ({"moe": {"n_experts": 4, "top_k": 1}},
     "model.moe.expert_intermediate_size: required key is missing"),
])
def test_bad_model_values_name_the_dotted_key(changes, expect):
    assert _error(get_model, _model(**changes)).startswith(expect)


def test_a_moe_model_may_have_no_dense_mlp():
    moe = {"n_experts": 8, "top_k": 2, "expert_intermediate_size": 64}
    spec = get_model(_model(intermediate_size=0, moe=moe, name="tiny-moe"))
    assert spec.name == "tiny-moe" and spec.moe.n_experts == 8 and spec.moe.first_dense_layers == 0


def test_inline_entry_builds_the_runtime_spec():
    hw = get_hardware(_hw(name="my-h100", peak_tflops={"bf16": 500, "fp8": None}))
    assert hw.name == "my-h100" and hw.peak_flops == {"bf16": 500e12, "fp8": None}
    assert hw.peak("fp8") == (500e12, "bf16")


def test_catalog_json_schema():
    schema = catalog_json_schema()
    json.dumps(schema)
    defs = schema["$defs"]
    hw = defs["HardwareEntry"]
    assert hw["additionalProperties"] is False
    assert set(hw["required"]) == {"kind", "peak_tflops", "hbm_gb", "hbm_bw_gb_s",
                                   "interconnect", "power_w", "price_usd_per_hour", "source"}
    assert hw["properties"]["hbm_gb"]["maximum"] == 1e15
    assert defs["ModelEntry"]["additionalProperties"] is False
    assert set(schema["properties"]) == {"hardware", "models", "quantization"}


def test_cli_prints_the_catalog_schema(capsys):
    assert main(["schema", "--catalog"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["title"] == "specsim catalogs" and "HardwareEntry" in printed["$defs"]
