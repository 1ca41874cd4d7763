"""Build tiny models locally, no downloads: `python -m dsv4rt.tinymodel --kind qwen2 --out models/tiny-qwen2`.

qwen2     a 2-layer Qwen2ForCausalLM (hidden 128, float32, ~0.8 M parameters) with a byte-level BPE tokenizer
          (~2000 tokens, ChatML template) trained here on a templated English/Chinese corpus for a fixed number of
          steps, so that greedy decoding gives varied text rather than a loop. Same seed, same steps: same weights.
deepseek  a 2-layer DeepseekV3ForCausalLM (MoE + MLA) with the same tokenizer and random weights, to exercise the
          MoE and MLA paths of the CPU engine (its output is not meant to be coherent).
Needs torch, transformers and tokenizers (the engine venv).
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
CITIES = ["Paris", "Tokyo", "Beijing", "Shanghai", "Berlin", "Madrid", "Cairo", "Lima", "Oslo", "Hefei",
          "Chengdu", "Nairobi", "Toronto", "Sydney", "Mumbai", "Seoul"]
CITIES_ZH = ["北京", "上海", "成都", "合肥", "深圳", "杭州", "西安", "武汉"]
WEATHER = ["sunny", "rainy", "cloudy", "windy", "snowy", "foggy", "warm", "cold"]
WEATHER_ZH = ["晴朗", "下雨", "多云", "刮风", "下雪", "有雾", "温暖", "寒冷"]
FOODS = ["rice", "noodles", "bread", "apples", "dumplings", "soup", "tea", "fish", "tofu", "oranges"]
FOODS_ZH = ["米饭", "面条", "饺子", "豆腐", "包子", "火锅", "馄饨", "茶"]
QUESTIONS = [
    ("你好，请介绍一下你自己。", "你好！我是一个很小的语言模型，在这台机器上训练，用来测试推理引擎。"),
    ("Hello, who are you?", "Hello! I am a tiny language model trained on this machine to test the engine."),
    ("What is the weather like today?", "It is sunny and warm today, a good day for a walk in the park."),
    ("今天天气怎么样？", "今天天气晴朗，很适合出去散步。"),
    ("Tell me about Paris.", "Paris is the capital of France. It is famous for its museums and cafes."),
    ("What do you like to eat?", "I like rice, noodles and fresh fruit, and a cup of tea after dinner."),
    ("你喜欢吃什么？", "我喜欢吃饺子和面条，也喜欢喝茶。"),
    ("Can you count to five?", "Sure: one, two, three, four, five."),
]


def corpus(seed: int = 0) -> tuple[str, list[str]]:
    """The shipped training text: plain sentences, and ChatML dialogues (kept apart)."""
    rng = random.Random(seed)
    plain = []
    for _ in range(900):
        kind = rng.randrange(6)
        if kind == 0:
            plain.append(f"The weather in {rng.choice(CITIES)} is {rng.choice(WEATHER)} today.")
        elif kind == 1:
            plain.append(f"{rng.choice(CITIES_ZH)}今天{rng.choice(WEATHER_ZH)}。")
        elif kind == 2:
            a, b = rng.randrange(1, 50), rng.randrange(1, 50)
            plain.append(f"{a} plus {b} is {a + b}.")
        elif kind == 3:
            plain.append(f"People in {rng.choice(CITIES)} like {rng.choice(FOODS)} and {rng.choice(FOODS)}.")
        elif kind == 4:
            plain.append(f"我喜欢吃{rng.choice(FOODS_ZH)}和{rng.choice(FOODS_ZH)}。")
        else:
            plain.append(f"{rng.choice(CITIES)} is a city with {rng.randrange(2, 30)} million people.")
    dialogues = []
    for i in range(60):
        question, answer = QUESTIONS[i % len(QUESTIONS)]
        if i >= len(QUESTIONS):
            city = rng.choice(CITIES)
            question, answer = (f"What is the weather in {city}?",
                                f"The weather in {city} is {rng.choice(WEATHER)} today, with a light breeze.")
        dialogues.append(f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n{answer}<|im_end|>\n")
    return " ".join(plain), dialogues


def train_tokenizer(text: str, dialogues: list[str], out: Path, vocab_size: int = 2000):
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator([text, *dialogues], vocab_size=vocab_size, min_frequency=2, special_tokens=SPECIALS)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                        bos_token=None, unk_token=None, additional_special_tokens=SPECIALS)
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(out)
    return tokenizer


def windows(tokenizer, text: str, dialogues: list[str], seq: int, rng: random.Random):
    """Training windows: plain text cut anywhere; dialogues always from `<|im_start|>user` (cut windows made
    raw-prompt outputs emit `<|im_end|>` or start new turns)."""
    plain_ids = tokenizer(text)["input_ids"]
    chats = [tokenizer(d)["input_ids"] for d in dialogues]
    pad = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    while True:
        if rng.random() < 0.5:
            start = rng.randrange(0, len(plain_ids) - seq - 1)
            yield plain_ids[start:start + seq]
        else:
            ids: list[int] = []
            while len(ids) < seq:
                ids += chats[rng.randrange(len(chats))]
            yield (ids + [pad] * seq)[:seq]


def build_qwen2(out: Path, steps: int, seed: int) -> dict:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    rng = random.Random(seed)
    text, dialogues = corpus(seed)
    tokenizer = train_tokenizer(text, dialogues, out)
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         tie_word_embeddings=True, eos_token_id=tokenizer.eos_token_id,
                         bos_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"), torch_dtype="float32")
    model = Qwen2ForCausalLM(config)
    optimiser = torch.optim.AdamW(model.parameters(), lr=3e-3)
    batches = windows(tokenizer, text, dialogues, 128, rng)
    pad_id = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    started = time.perf_counter()
    model.train()
    loss_value = float("nan")
    for step in range(steps):
        batch = torch.tensor([next(batches) for _ in range(16)])
        labels = batch.masked_fill(batch == pad_id, -100)  # padding is not something to learn to say
        loss = model(input_ids=batch, labels=labels).loss
        loss.backward()
        optimiser.step()
        optimiser.zero_grad()
        loss_value = loss.item()
        if step % 100 == 0 or step == steps - 1:
            print(f"step {step + 1}/{steps} loss {loss_value:.3f}", flush=True)
    model.eval()
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(out, safe_serialization=True)
    return {"kind": "qwen2", "steps": steps, "seed": seed, "loss": round(loss_value, 4),
            "train_s": round(time.perf_counter() - started, 1),
            "parameters": sum(p.numel() for p in model.parameters()), "vocab_size": len(tokenizer)}


def build_deepseek(out: Path, seed: int) -> dict:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(seed)
    text, dialogues = corpus(seed)
    tokenizer = train_tokenizer(text, dialogues, out)
    config = AutoConfig.for_model(
        "deepseek_v3", vocab_size=len(tokenizer), hidden_size=256, intermediate_size=256, moe_intermediate_size=64,
        num_hidden_layers=2, first_k_dense_replace=1, num_attention_heads=4, num_key_value_heads=4,
        n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=1, n_group=1, topk_group=1,
        q_lora_rank=None, kv_lora_rank=512, qk_nope_head_dim=64, qk_rope_head_dim=64, v_head_dim=64,
        topk_method="noaux_tc", scoring_func="sigmoid", max_position_embeddings=512, rope_scaling=None,
        tie_word_embeddings=False, eos_token_id=tokenizer.eos_token_id, torch_dtype="bfloat16")
    model = AutoModelForCausalLM.from_config(config).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    cfg = json.loads((out / "config.json").read_text())
    cfg.update({"topk_method": "noaux_tc", "scoring_func": "sigmoid"})  # what vLLM's loader looks for
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
    return {"kind": "deepseek", "seed": seed, "parameters": sum(p.numel() for p in model.parameters()),
            "vocab_size": len(tokenizer)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kind", choices=("qwen2", "deepseek"), default="qwen2")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=500, help="training steps (qwen2)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    info = build_qwen2(args.out, args.steps, args.seed) if args.kind == "qwen2" else build_deepseek(args.out,
                                                                                                      args.seed)
    (args.out / "dsv4ctl-build.json").write_text(json.dumps(info, indent=2) + "\n")
    print(json.dumps(info), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
