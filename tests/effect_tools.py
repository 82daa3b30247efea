"""Three real test tools, one per effect class, their fake providers, and a child-process script.

Every side effect is one entry in an **external** ledger (``journal.testing.Ledger``: a separate
file, fsynced): the journal is what is being tested, the ledger is the witness. The providers
keep their own state in files too (guarded by ``flock``, written with fsync and an atomic
rename), so it survives a SIGKILL exactly as a real provider's would.

- ``pay_invoice`` (Idempotent): ``KeyedProvider`` deduplicates on the idempotency key **only**,
  never on the content, so a broken key derivation shows up as a second ledger entry.
- ``send_sms`` (Queryable): ``RequestProvider`` remembers every request id it received and
  answers lookups from that (``landed`` / ``never arrived``); it never deduplicates a send, so a
  re-issue after the request had landed shows up as a second ledger entry. ``fail_lookups()``
  makes its lookup raise.
- ``send_email`` (Unsafe): no protection at all; every run is a ledger entry.

Each tool passes the crash points ``tool.before_run`` (dispatched, provider not reached) and
``tool.after_run`` (the provider did it, the result not yet recorded).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import journal
from journal import crash
from journal.testing import Ledger

SESSION = "s"
CALL = "c1"
ARGUMENTS: dict[str, dict[str, Any]] = {
    "pay_invoice": {"invoice": "EL-2026-11", "cents": 4200},
    "send_sms": {"to": "+15550100", "text": "on my way"},
    "send_email": {"to": "ops@example.com", "subject": "rotate the keys"},
}


def invoice_key(arguments: dict[str, Any]) -> str:
    """A deterministic key: a hash of the canonical JSON of the recorded arguments."""
    canonical = json.dumps(arguments, sort_keys=True, separators=(",", ":"))
    return "pay-" + hashlib.sha256(canonical.encode()).hexdigest()[:16]


class _FileDict:
    """A dict in a JSON file: read-modify-write under an exclusive lock, replaced atomically."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @contextlib.contextmanager
    def locked(self) -> Iterator[dict[str, Any]]:
        with open(self.path.with_suffix(".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            data = self.read()
            before = dict(data)
            yield data
            if data != before:
                tmp = self.path.with_suffix(".tmp")
                with open(tmp, "w") as f:
                    json.dump(data, f)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, self.path)
                dir_fd = os.open(self.path.parent, os.O_RDONLY)
                try:
                    os.fsync(dir_fd)
                finally:
                    os.close(dir_fd)

    def read(self) -> dict[str, Any]:
        return json.loads(self.path.read_text()) if self.path.exists() else {}


class KeyedProvider:
    """A payment provider that deduplicates on the idempotency key, and on nothing else."""

    def __init__(self, root: Path, ledger: Ledger) -> None:
        self.seen = _FileDict(root / "keyed_provider.json")
        self.requests = Ledger(root / "keyed_requests")  # every request, with the key it carried
        self.ledger = ledger

    def charge(self, key: str, arguments: dict[str, Any]) -> str:
        self.requests.record(key=key)
        with self.seen.locked() as seen:
            if key in seen:
                return seen[key]
            # The receipt is random, so a charge that was not deduplicated is visible in the result too.
            receipt = f"paid {arguments['cents']} cents for {arguments['invoice']}, receipt {uuid.uuid4().hex[:8]}"
            self.ledger.record(tool="pay_invoice", key=key, **arguments)
            seen[key] = receipt
            return receipt


class RequestProvider:
    """An SMS provider that remembers request ids and answers "did request X land?"."""

    def __init__(self, root: Path, ledger: Ledger) -> None:
        self.received = _FileDict(root / "request_provider.json")
        self.failing = root / "lookup_fails"
        self.lookups = Ledger(root / "lookups")
        self.ledger = ledger

    def send(self, request_id: str, arguments: dict[str, Any]) -> str:
        with self.received.locked() as received:
            answer = f"sms {uuid.uuid4().hex[:8]} queued to {arguments['to']}"
            self.ledger.record(tool="send_sms", request_id=request_id, **arguments)
            received[request_id] = answer
            return answer

    def lookup(self, request_id: str, arguments: Any) -> journal.Landed | journal.NeverArrived:
        self.lookups.record(request_id=request_id)
        if self.failing.exists():
            raise ConnectionError("provider status API unreachable")
        received = self.received.read()
        if request_id in received:
            return journal.Landed(received[request_id])
        return journal.NeverArrived()

    def fail_lookups(self) -> None:
        self.failing.touch()


class World:
    """The test tools, their providers, the ledger and the operator's inbox under one directory."""

    def __init__(self, root: str | os.PathLike[str], *, key=invoice_key) -> None:
        self.root = Path(root)
        self.ledger = Ledger(self.root / "ledger")
        self.inbox = Ledger(self.root / "operator_inbox")  # what the operator callback received
        self.keyed = KeyedProvider(self.root, self.ledger)
        self.sms = RequestProvider(self.root, self.ledger)
        self.registry = journal.ToolRegistry(on_indeterminate=self.notify_operator)
        self.registry.register("pay_invoice", self.pay_invoice, effects=journal.Idempotent(key=key))
        self.registry.register("send_sms", self.send_sms, effects=journal.Queryable(lookup=self.sms.lookup))
        self.registry.register("send_email", self.send_email, effects=journal.Unsafe())

    # -- the tools: fn(arguments, context) -> content ------------------------------------------

    def pay_invoice(self, arguments: dict[str, Any], context: journal.ToolContext) -> str:
        crash.reached("tool.before_run")
        assert context.idempotency_key is not None
        receipt = self.keyed.charge(context.idempotency_key, arguments)
        crash.reached("tool.after_run")
        return receipt

    def send_sms(self, arguments: dict[str, Any], context: journal.ToolContext) -> str:
        crash.reached("tool.before_run")
        assert context.request_id is not None
        answer = self.sms.send(context.request_id, arguments)
        crash.reached("tool.after_run")
        return answer

    def send_email(self, arguments: dict[str, Any], context: journal.ToolContext) -> str:
        crash.reached("tool.before_run")
        self.ledger.record(tool="send_email", **arguments)
        crash.reached("tool.after_run")
        return f"mail sent to {arguments['to']}"

    def notify_operator(self, call: Any) -> None:
        self.inbox.record(session=call.session_id, call=call.call_id, reason=call.notification["data"]["reason"])

    # -- a turn that asks for one call ---------------------------------------------------------

    def request(self, j: journal.Journal, tool: str, *, session: str = SESSION, call: str = CALL) -> Any:
        """A session whose open turn's model asked for one call of ``tool``; returns the turn."""
        j.create_session(session)
        j.append(session, "user_message", {"content": f"please {tool}"})
        turn = j.turn_start(session)
        turn.step_start()
        turn.provider_started()
        turn.assistant(
            "", tool_calls=[{"id": call, "name": tool, "arguments": ARGUMENTS[tool]}], stop_reason="tool_use"
        )
        return turn


def random_key(arguments: Any) -> str:
    """A broken key derivation: a different key every time (what recovery must notice)."""
    return uuid.uuid4().hex


CHILD = """
import json, os, sys
import journal
from tests.effect_tools import World, invoice_key, random_key
db, root, action = sys.argv[1:4]
world = World(root, key=random_key if os.environ.get("BROKEN_KEY") else invoice_key)
with journal.open(db) as j:
    if action == "call":
        turn = world.request(j, sys.argv[4])
        world.registry.call(j, turn, "c1")
    elif action == "recover":
        print(json.dumps([o.to_dict() for o in j.recover_effects(world.registry)]))
print("finished without crashing")
"""
