"""Greedy token ids from HF transformers for a spec's requests: the golden the CPU engine must match exactly.

    python -m dsv4rt.golden spec.json      # prints a JSON list of token-id lists, one per request

Uses the model's own chat template (as llm.chat does) and ignores EOS like `ignore_eos` (transformers 5.19 still
stops at the model's EOS with eos_token_id=None: an empty list turns it off).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def golden(spec: dict) -> list[list[int]]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model_dir = spec["model"]["path"]
    tokenizer = AutoTokenizer.from_pretrained(spec["model"].get("tokenizer") or model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.eval()
    n = spec.get("batch") or len(spec["requests"])
    results = []
    for i in range(n):
        request = spec["requests"][i % len(spec["requests"])]
        if request.get("messages"):
            ids = tokenizer.apply_chat_template(request["messages"], add_generation_prompt=True, tokenize=True,
                                                return_dict=False)
        else:
            ids = tokenizer(request["prompt"])["input_ids"]
        inputs = torch.tensor([ids])
        with torch.no_grad():
            out = model.generate(inputs, attention_mask=torch.ones_like(inputs), do_sample=False,
                                 max_new_tokens=spec["sampling"]["max_tokens"],
                                 eos_token_id=[] if spec["sampling"]["ignore_eos"] else None,
                                 pad_token_id=tokenizer.pad_token_id)
        results.append(out[0, len(ids):].tolist())
    return results


if __name__ == "__main__":
    print(json.dumps(golden(json.loads(Path(sys.argv[1]).read_text()))))
