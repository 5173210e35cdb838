"""Open up the heads the demo selects (L1H2, L14H8, L19H4 on SmolLM2-135M, three-shot 2-digit
addition): which examples their removal fixes and breaks, where one of them attends, its direct
effect on the answer's logit, the next tokens that change most, and its attribute scores.

Run with:  .venv/bin/python examples/probe_heads.py
Only the public API is used (the handle celtk.Run for the model, splits and prompts); everything returns
data, printed here for reading.
"""

import tempfile

import numpy as np

import celtk
from celtk import probe
from celtk.circuits import head_attribute_scores


def main(n: int = 40, heads: str = "L1H2,L14H8,L19H4", focus: str = "L14H8") -> dict:
    # a handle on a run that is never screened: its model (loaded once), task, splits and prompts
    config = celtk.RunConfig(model="smollm2-135m", task="arithmetic:2da", discovery=1, heldout=n, seed=1, fewshot=3)
    run = celtk.Run(tempfile.mkdtemp(prefix="probe-heads-"), config=config)  # nothing is written there
    model, task, splits = run.model, run.task, run.splits

    # 1. what the head set does, example by example
    eff = probe.effect(model, task, splits.heldout, splits.shots, heads)
    print(f"removing {heads}: {eff.summary.intact_accuracy:.0%} -> {eff.summary.ablated_accuracy:.0%}, "
          f"fixes {len(eff.fixes)}, breaks {len(eff.breaks)}")

    # 2. one fixed example, opened up
    example = next(e for e in splits.heldout if e.id in eff.fixes) if eff.fixes else splits.heldout[0]
    prompt, answer = run.prompt(example), run.answer(example)  # the prompt the run scores, and its answer as text
    att = probe.attention(model, prompt, focus)
    print(f"{focus} on {example.id}: last token attends to", att.top_keys(n=3))
    # SmolLM2 splits " 120" into " ", "1", "2", "0": attribute the first digit (token 1)
    dla = probe.direct_logit_attribution(model, prompt, answer, token=1)
    rank = {h: i + 1 for i, h in enumerate(dla)}
    print(f"direct logit attribution to the first digit of {answer!r}: {focus} {dla[focus]:+.3f} "
          f"(rank {rank[focus]} of {len(dla)}); top heads {list(dla)[:3]}")
    changes = probe.next_token_changes(model, prompt, heads, n=5)
    print("next tokens changed most:", [(c.token, round(c.p_intact, 3), round(c.p_ablated, 3)) for c in changes])

    # 3. what kind of heads these are
    scores = head_attribute_scores(model)
    selected = celtk.HeadSet.parse(heads)
    attributes = {str(h): {k: float(v[h.layer, h.head]) for k, v in scores.items()} for h in selected}
    print("attribute scores:", {h: {k: round(v, 3) for k, v in s.items()} for h, s in attributes.items()})
    return {"effect": eff, "example": example.id, "attention": att, "dla": dla, "changes": changes,
            "attributes": attributes, "max_scores": {k: float(np.max(v)) for k, v in scores.items()}}


if __name__ == "__main__":
    main()
