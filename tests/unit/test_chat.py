"""Chat mode as lm-eval 0.4 handles it: a fixed date, one BOS, no choice delimiter, the
generation prompt's newline moved into the continuation; and the hash of the prepared ids."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest

from celtk.errors import ConfigError
from celtk.evaluation.prompts import CHAT_DATE, adds_bos, encode_pair, format_prompt, prepare, prepared_hash
from celtk.models import Model
from celtk.tasks import Example, get_task, make_splits

FIX = Path(__file__).parent.parent / "fixtures"

CHATML = ("{%- for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
          "{%- endfor %}"
          "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{%- endif %}")
# the date logic of Llama-3.2-Instruct's template (date_string, else strftime_now), then ChatML
LLAMA_STYLE = (
    "{%- if not date_string is defined %}{%- if strftime_now is defined %}"
    "{%- set date_string = strftime_now(\"%d %b %Y\") %}{%- else %}{%- set date_string = \"26 Jul 2024\" %}"
    "{%- endif %}{%- endif %}"
    "{{ '<|im_start|>system\\nToday Date: ' + date_string + '<|im_end|>\\n' }}" + CHATML
)
# SmolLM3's template calls strftime_now directly, with another format
SMOLLM3_STYLE = "{{ '<|im_start|>system\\nToday Date: ' + strftime_now(\"%d %B %Y\") + '<|im_end|>\\n' }}" + CHATML
BOS_FIRST = "{{ bos_token }}" + CHATML


@pytest.fixture
def tokenizer():
    """A private copy of the packaged SmolLM2 tokenizer (tests change its template)."""
    from transformers import AutoTokenizer

    from celtk.models import ALIASES, dequantized_dir

    tok = AutoTokenizer.from_pretrained(dequantized_dir(ALIASES["smollm2-135m"].locate()))
    tok.pad_token = tok.pad_token or tok.eos_token
    return tok


from celtk.models import Architecture


def fake_model(tokenizer, architecture="LlamaForCausalLM"):
    """A :class:`Model` without weights: prompt building needs only the tokenizer and architecture."""
    return Model(bridge=None, tokenizer=tokenizer, name="no-weights", source="test", architecture=architecture,
                 n_layers=1, n_heads=1, n_kv_heads=1, d_head=1, d_model=1, d_vocab=len(tokenizer),
                 arch=object.__new__(Architecture))  # no weights: an empty Architecture (prompts never read it)


def freeze_today(monkeypatch, day: datetime.datetime) -> None:
    """Make transformers' ``strftime_now`` see ``day`` as today."""
    import transformers.utils.chat_template_utils as ctu

    class Frozen(datetime.datetime):
        @classmethod
        def now(cls, tz=None):
            return day

    monkeypatch.setattr(ctu, "datetime", Frozen)


def arithmetic_splits():
    return make_splits(get_task("arithmetic:2da"), 4, 0, fewshot=2)


@pytest.mark.parametrize("template", [LLAMA_STYLE, SMOLLM3_STYLE], ids=["llama-date_string", "smollm3-strftime"])
def test_date_template_gives_the_same_ids_on_any_day(tokenizer, monkeypatch, template):
    tokenizer.chat_template = template
    model, task, splits = fake_model(tokenizer), get_task("arithmetic:2da"), arithmetic_splits()
    ids, raw = [], []
    for day in (datetime.datetime(2025, 3, 1), datetime.datetime(2026, 11, 30)):
        freeze_today(monkeypatch, day)
        ids.append(prepare(model, task, splits.discovery, splits.shots, chat=True).requests)
        raw.append(tokenizer.apply_chat_template([{"role": "user", "content": "x"}], tokenize=False))
    assert raw[0] != raw[1]  # the frozen clock reaches the template: unfixed renders differ
    assert ids[0] == ids[1]
    prompt = format_prompt(model, task, splits.discovery[0], splits.shots, chat=True)
    assert "26 Jul 2024" in prompt or "26 July 2024" in prompt


def test_chat_date_setting_is_used_and_changes_the_hash(tokenizer):
    tokenizer.chat_template = SMOLLM3_STYLE
    model, task, splits = fake_model(tokenizer), get_task("arithmetic:2da"), arithmetic_splits()
    a = prepare(model, task, splits.discovery, splits.shots, chat=True)
    b = prepare(model, task, splits.discovery, splits.shots, chat=True, chat_date="2025-01-02")
    assert "02 January 2025" in b.prompts[0] and CHAT_DATE == "2024-07-26"
    assert prepared_hash(a) == prepared_hash(prepare(model, task, splits.discovery, splits.shots, chat=True))
    assert prepared_hash(a) != prepared_hash(b)
    with pytest.raises(ConfigError, match="chat_date must be an ISO date"):
        prepare(model, task, splits.discovery, splits.shots, chat=True, chat_date="yesterday")


def test_prepared_hash_follows_every_token(tokenizer):
    model, task, splits = fake_model(tokenizer), get_task("arithmetic:2da"), arithmetic_splits()
    base = prepare(model, task, splits.discovery, splits.shots)
    assert prepared_hash(base) != prepared_hash(prepare(model, task, splits.discovery, splits.shots[:1]))
    assert prepared_hash(base) != prepared_hash(prepare(model, task, splits.discovery[::-1], splits.shots))
    assert prepared_hash(base) != prepared_hash(prepare(model, task, splits.discovery, splits.shots, chat=True))


def bos_tokenizer(tokenizer):
    """Make the tokenizer add BOS (``<|endoftext|>``) to every encoding, as Llama's and Gemma's do."""
    from tokenizers import processors

    bos = "<|endoftext|>"
    tokenizer.bos_token = bos
    bos_id = tokenizer.convert_tokens_to_ids(bos)
    tokenizer.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, bos_id)])
    assert adds_bos(tokenizer)
    return tokenizer, bos_id


def test_template_that_writes_bos_gets_no_second_bos(tokenizer):
    tokenizer, bos_id = bos_tokenizer(tokenizer)
    tokenizer.chat_template = BOS_FIRST
    model, task, splits = fake_model(tokenizer), get_task("arithmetic:2da"), arithmetic_splits()
    chat = prepare(model, task, splits.discovery, splits.shots, chat=True)
    plain = prepare(model, task, splits.discovery, splits.shots, chat=False)
    assert chat.prompts[0].startswith("<|endoftext|>")
    for prepared in (chat, plain):  # exactly one BOS, first, whether the template or the tokenizer wrote it
        for request in prepared.requests:
            assert request.context[0] == bos_id and request.context[1] != bos_id
            assert bos_id not in request.context[1:] and bos_id not in request.continuation


def test_choice_under_chat_drops_the_delimiter_and_scores_the_newline(tokenizer):
    tokenizer.chat_template = SMOLLM3_STYLE
    model, task = fake_model(tokenizer), get_task("boolq", data_path=str(FIX / "boolq"))
    splits = make_splits(task, 2, 2)
    chat = prepare(model, task, splits.heldout, chat=True)
    plain = prepare(model, task, splits.heldout, chat=False)
    # lm-eval: target_delimiter "" under a chat template; the template's trailing "\n" moves to the continuation
    assert chat.prompts[0].endswith("<|im_start|>assistant\n")
    assert [tokenizer.decode(r.continuation) for r in chat.requests[:2]] == ["\nno", "\nyes"]
    assert [tokenizer.decode(r.continuation) for r in plain.requests[:2]] == [" no", " yes"]
    ctx, cont = encode_pair(tokenizer, chat.prompts[0], "no")
    assert chat.requests[0].context == tuple(ctx) and chat.requests[0].continuation == tuple(cont)


def test_arithmetic_target_under_chat_is_scored_as_lm_eval_scores_it(tokenizer):
    tokenizer.chat_template = SMOLLM3_STYLE
    model, task = fake_model(tokenizer), get_task("arithmetic:2da")
    example = Example(id="x", context="Question: What is 98 plus 45?\nAnswer:", target=" 143")
    chat = prepare(model, task, [example], chat=True)
    # lm-eval passes (rendered context, " 143") to _encode_pair, which moves the generation
    # prompt's trailing "\n" into the continuation: the scored text is "\n 143"
    assert tokenizer.decode(chat.requests[0].continuation) == "\n 143"
    assert tokenizer.decode(chat.requests[0].context).endswith("<|im_start|>assistant")
    plain = prepare(model, task, [example], chat=False)
    assert tokenizer.decode(plain.requests[0].continuation) == " 143"


def test_smollm3_renders_in_non_thinking_mode(tokenizer):
    tokenizer.chat_template = ("{%- if enable_thinking is defined and not enable_thinking %}/no_think{%- else %}/think"
                               "{%- endif %}{{ messages[0]['content'] }}")
    example = Example(id="x", context="Q", target=" 1")
    task = get_task("arithmetic:2da")
    assert format_prompt(fake_model(tokenizer, "SmolLM3ForCausalLM"), task, example, [], chat=True) == "/no_thinkQ"
    assert format_prompt(fake_model(tokenizer, "LlamaForCausalLM"), task, example, [], chat=True) == "/thinkQ"


def test_chat_without_a_template_is_a_clear_error(tokenizer):
    tokenizer.chat_template = None
    example = Example(id="x", context="Q", target=" 1")
    with pytest.raises(ConfigError, match="--chat needs a chat template"):
        format_prompt(fake_model(tokenizer), get_task("arithmetic:2da"), example, [], chat=True)
