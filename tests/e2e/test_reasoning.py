"""Reasoning (SPEC §19) through a real server and the real `openai` client: what a model streams as
`delta.reasoning_content` or `delta.reasoning` goes to the client as `reasoning_delta` (with `seq`),
apart from the text; it is stored with the answer (not with VERNIS_STORE_REASONING=0), shown again
in the history, and never sent back to the model."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tests.e2e.test_llm_faults import replay
from tests.fixtures.server import VernisFactory, text_of, types_of
from tests.utils import squash
from vernis.model.scripted import SCRIPTED_CHAT_MODEL, Fault, Quirk, Reply


def is_chat(body: Mapping[str, Any]) -> bool:
    return body.get("model") == SCRIPTED_CHAT_MODEL


def reasoning_of(events: list[dict[str, Any]]) -> str:
    return "".join(e["content"] for e in events if e["type"] == "reasoning_delta")


THOUGHTS = ["Jane ", "called ", "twice; ", "the second ", "call matters."]
ANSWER = ["She ", "called ", "about ", "the renewal."]


async def test_reasoning_streams_apart_is_stored_replayed_and_never_sent_back(
    vernis_factory: VernisFactory,
) -> None:
    """Reasoning arrives as reasoning_delta frames with seq before the text, is not in the text, comes back in the history, and the next request to the model does not carry it."""
    async with vernis_factory() as vernis:
        vernis.scripted.add(Reply(ANSWER, reasoning=THOUGHTS, quirks=Quirk.REASONING), match=is_chat)
        async with vernis.opened() as client:
            events = await client.answer("why did Jane call?")
            await client.until("title_updated")
            await client.answer("and then?")
        history = await replay(vernis)
    answer = events[events.index(next(e for e in events if e["type"] == "assistant_start")) :]
    kinds = [e["type"] for e in answer if e["type"] in ("reasoning_delta", "text_delta")]
    assert squash(kinds) == ["reasoning_delta", "text_delta"]
    assert all(isinstance(e["seq"], int) for e in answer if e["type"] == "reasoning_delta")
    seqs = [e["seq"] for e in answer if "seq" in e]
    assert seqs == sorted(set(seqs))
    assert reasoning_of(events) == "Jane called twice; the second call matters."
    assert text_of(events) == "She called about the renewal."
    first = history[1]
    assert (first["role"], first["content"]) == ("assistant", "She called about the renewal.")
    assert first["reasoning"] == "Jane called twice; the second call matters."
    assert "reasoning" not in history[3]  # the echo answer had none
    second = [body for body in vernis.scripted.requests if is_chat(body)][-1]
    sent = str(second["messages"])
    assert "She called about the renewal." in sent
    assert "the second call matters" not in sent


async def test_interleaved_reasoning_and_text_are_kept_apart(vernis_factory: VernisFactory) -> None:
    """A provider alternating reasoning and text chunks: each frame goes out as it came, neither doubled, the text without the reasoning."""
    async with vernis_factory() as vernis:
        vernis.scripted.add(
            Reply(ANSWER, reasoning=THOUGHTS, quirks=Quirk.INTERLEAVED_REASONING), match=is_chat
        )
        async with vernis.opened() as client:
            events = await client.answer("why did Jane call?")
        history = await replay(vernis)
    kinds = [e["type"] for e in events if e["type"] in ("reasoning_delta", "text_delta")]
    assert kinds == ["reasoning_delta", "text_delta"] * 4 + ["reasoning_delta"]
    assert reasoning_of(events) == "".join(THOUGHTS)
    assert text_of(events) == "".join(ANSWER)
    assert (history[1]["content"], history[1]["reasoning"]) == ("".join(ANSWER), "".join(THOUGHTS))


async def test_reasoning_then_an_error_is_one_failure_with_the_reasoning_kept(
    vernis_factory: VernisFactory,
) -> None:
    """Reasoning only, then an error mid-stream: no retry (the user saw the reasoning), one llm_unavailable, the reasoning stored with the failed answer."""
    async with vernis_factory(llm_max_retries=2) as vernis:
        vernis.scripted.add(
            Reply(ANSWER, reasoning=THOUGHTS, fault=Fault.error_mid_stream(after=4)),
            match=is_chat,
            times=None,
        )
        async with vernis.opened() as client:
            events = await client.answer("why did Jane call?")
        history = await replay(vernis)
    assert reasoning_of(events) == "Jane called twice; "
    assert text_of(events) == ""
    assert [e["code"] for e in events if e["type"] == "error"] == ["llm_unavailable"]
    assert types_of(events)[-1] == "assistant_end"
    assert len([body for body in vernis.scripted.requests if is_chat(body)]) == 1
    assert (history[1]["status"], history[1]["content"]) == ("failed", "")
    assert history[1]["reasoning"] == "Jane called twice; "


async def test_with_store_reasoning_off_it_is_shown_live_but_not_kept(vernis_factory: VernisFactory) -> None:
    """VERNIS_STORE_REASONING=0: reasoning_delta frames still go out live; the stored answer and its history have none."""
    async with vernis_factory(store_reasoning=False) as vernis:
        vernis.scripted.add(Reply(ANSWER, reasoning=THOUGHTS), match=is_chat)
        async with vernis.opened() as client:
            events = await client.answer("why did Jane call?")
        history = await replay(vernis)
    assert reasoning_of(events) == "".join(THOUGHTS)
    assert history[1]["content"] == "".join(ANSWER)
    assert "reasoning" not in history[1]


async def test_the_scripted_model_reasons_when_asked_to_think(vernis_factory: VernisFactory) -> None:
    """The scripted model's reasoning scenario (the offline demo's): "think" in a message brings reasoning in both field names, then the answer."""
    async with vernis_factory() as vernis, vernis.opened() as client:
        events = await client.answer("Think it over: who should I call first?")
    assert "wants me to think before answering" in reasoning_of(events)
    assert "who should I call first?" in text_of(events)
    assert "wants me to think" not in text_of(events)
