"""transformers' side of bench/generate: greedy generation with AutoModelForCausalLM.generate (eager, f32, KV cache) on
the same folder, prompt and thread count as examples/generate. Prints one JSON line like examples/generate --json:
{"tokens": [[...]], "time_to_first_token_s": .., "decode_tokens_per_s": ..}. The time to first token is a generate()
of one new token; the decode rate is the rest of a generate() of N tokens over N - 1 tokens (the same split
examples/generate reports).
Usage: torch_generate.py --model DIR --prompt IDS --max-new-tokens N [--threads T]
       torch_generate.py --make DIR   (writes the benchmark's model: a Llama of 57 M parameters, GQA 8/2, random)"""
import argparse
import json
import time

import torch
import transformers


def make(folder):
    config = transformers.LlamaConfig(vocab_size=32000, hidden_size=512, intermediate_size=1536, num_hidden_layers=8,
                                      num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=2048,
                                      tie_word_embeddings=False, bos_token_id=1, eos_token_id=None, pad_token_id=0)
    torch.manual_seed(0)
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(folder, safe_serialization=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--make")
    ap.add_argument("--model")
    ap.add_argument("--prompt")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    if a.make:
        return make(a.make)
    torch.set_num_threads(a.threads)
    model = transformers.AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32).eval()
    ids = torch.tensor([[int(x) for x in a.prompt.split(",")]])
    kw = dict(do_sample=False, pad_token_id=0, eos_token_id=None)
    with torch.no_grad():
        model.generate(ids, max_new_tokens=4, **kw)  # warm-up
        t0 = time.perf_counter()
        model.generate(ids, max_new_tokens=1, **kw)
        ttft = time.perf_counter() - t0
        t0 = time.perf_counter()
        out = model.generate(ids, max_new_tokens=a.max_new_tokens, min_new_tokens=a.max_new_tokens, **kw)
        total = time.perf_counter() - t0
    tokens = [int(x) for x in out[0, ids.shape[1]:]]
    print(json.dumps({"tokens": [tokens], "time_to_first_token_s": ttft,
                      "decode_tokens_per_s": (a.max_new_tokens - 1) / max(total - ttft, 1e-9)}))


if __name__ == "__main__":
    main()
