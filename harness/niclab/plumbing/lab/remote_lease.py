"""Card leases on the card's own host: two controllers never share a card.

For the run an ssh command holds `flock -n` on the host's leases/HOST.PCI.lock, beside a holder record, and
waits on its input: the lease ends when niclab closes it or the ssh ends, however it ends. A card another
controller holds is refused with the record read there (size-capped, typed), or waited for (`--wait`).
docs/architecture.md, "A card is leased on its own host"; docs/lab.md, "Remote hosts".
"""

from __future__ import annotations

import os
import selectors
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

from pydantic import ValidationError

from niclab.base.errors import NiclabError
from niclab.base.node import Progress
from niclab.base.procs import stop
from niclab.base.text import said
from niclab.plumbing.lab.lease import LEASE_KEY, Holder, card_name, own_record, take_waiting
from niclab.plumbing.lab.remote import CONNECT_TIMEOUT_S, HostShell
from niclab.plumbing.lab.statedir import shown

STATE = "/var/lib/niclab"  # on the card's host, under HostShell.root
ANSWER_TIMEOUT_S = CONNECT_TIMEOUT_S + 20.0
RELEASE_TIMEOUT_S = 10.0
_RECORD_LIMIT = 4096
_ANSWER_LIMIT = 2 * _RECORD_LIMIT

# $1 the root the host's /var/lib/niclab lies under ("" on a real host), $2 the lease key (HOST.PCI, checked
# here before it is sent), $3 the holder record (one line of JSON).
LEASE = r"""
r=$1 key=$2 rec=$3
umask 077
me=$(id -u)
safe() {
  if [ -L "$1" ]; then echo "unsafe $1 is a symbolic link"; exit 3; fi
  if [ ! -e "$1" ] && ! mkdir -m 0700 "$1" 2>/dev/null; then echo "unsafe cannot create $1"; exit 3; fi
  set -- "$1" $(stat -c '%u %A' "$1")
  [ "$2" = "$me" ] || { echo "unsafe $1 belongs to uid $2, not to uid $me"; exit 3; }
  case $3 in
    d????w????|d???????w?) echo "unsafe $1 is writable by others"; exit 3 ;;
    d*) ;;
    *) echo "unsafe $1 is not a directory"; exit 3 ;;
  esac
}
safe "$r/var/lib/niclab"
safe "$r/var/lib/niclab/leases"
cd "$r/var/lib/niclab/leases" || exit 3
for f in "$key.lock" "$key.json"; do
  if [ -L "$f" ] || { [ -e "$f" ] && [ ! -f "$f" ]; }; then echo "unsafe $f is not a plain file"; exit 3; fi
done
command -v flock >/dev/null 2>&1 || { echo "unsafe flock is missing (apt install util-linux)"; exit 3; }
exec 9>>"$key.lock" || exit 3
if ! flock -n 9; then
  echo busy
  head -c 4096 "$key.json" 2>/dev/null | tr '\t\n' '  '
  echo
  exit 0
fi
if ! { printf '%s\n' "$rec" > ".$key.json.$$" && mv -f ".$key.json.$$" "$key.json"; }; then
  echo "unsafe cannot write $key.json"
  exit 3
fi
echo held
cat >/dev/null
[ "$(head -c 4096 "$key.json" 2>/dev/null)" = "$rec" ] && rm -f "$key.json"
exit 0
"""

# $1 the root, as above: each held lease as held<TAB>KEY<TAB>RECORD (the record on one line), then end.
LIST = r"""
d=$1/var/lib/niclab/leases
if [ -d "$d" ] && [ ! -L "$d" ] && cd "$d"; then
  for f in *.json; do
    k=${f%.json}
    [ -f "$f" ] && [ ! -L "$f" ] && [ -f "$k.lock" ] && [ ! -L "$k.lock" ] || continue
    flock -n -s "$k.lock" true 2>/dev/null && continue
    printf 'held\t%s\t%s\n' "$k" "$(head -c 4096 "$f" | tr '\t\n' '  ')"
  done
fi
echo end
"""


def _holder(text: str) -> Holder | None:
    try:
        return Holder.model_validate_json(text.strip()[:_RECORD_LIMIT])
    except ValidationError:
        return None


def _describe(holder: Holder | None) -> str:
    return holder.describe() if holder is not None else "a holder that left no readable record"


def _read_answer(shell: HostShell, proc: subprocess.Popen[bytes]) -> tuple[str, str]:
    """The lease script's first line and, after `busy`, the rest; the host not answering is a NiclabError."""
    assert proc.stdout is not None
    deadline = time.monotonic() + ANSWER_TIMEOUT_S
    data = bytearray()
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        while b"\n" not in data or (data.startswith(b"busy\n") and data.count(b"\n") < 2):
            left = deadline - time.monotonic()
            if left <= 0:
                stop(proc)
                raise NiclabError(
                    f"lab host {shell.name} ({shell.uri}) did not answer: taking a lease took longer than "
                    f"{ANSWER_TIMEOUT_S:g} s; {shell.fix()}"
                )
            if not selector.select(left):
                continue
            chunk = os.read(proc.stdout.fileno(), 4096)
            if not chunk:
                break
            data += chunk
            if len(data) > _ANSWER_LIMIT:
                stop(proc)
                raise NiclabError(f"lab host {shell.name}: the lease command printed too much; refused")
    first, _, rest = data.decode(errors="replace").partition("\n")
    return first, rest


def _try_take(shell: HostShell, key: str, record: Holder) -> tuple[subprocess.Popen[bytes] | None, Holder | None]:
    proc = shell.spawn(LEASE, shell.root, key, record.model_dump_json())
    first, rest = _read_answer(shell, proc)
    if first == "held":
        return proc, None
    try:
        proc.wait(timeout=RELEASE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        stop(proc)
    stderr = _stderr(proc)
    if first == "busy":
        return None, _holder(rest.partition("\n")[0])
    if proc.returncode == 255 and shell.remote:
        raise shell.unanswered(stderr or "ssh failed without saying why")
    where = f"{shell.root}{STATE}/leases"
    if first.startswith("unsafe "):
        raise NiclabError(
            f"lab host {shell.name}: cannot lease card {key} there: {shown(first[len('unsafe ') :])[:300]}; "
            f"fix: make {where} a directory of root's, writable by no one else (or remove it: niclab makes it)"
        )
    raise NiclabError(
        f"lab host {shell.name}: taking the lease of {key} in {where} failed: "
        f"{stderr or shown(first)[:300] or f'status {proc.returncode}'}"
    )


def _stderr(proc: subprocess.Popen[bytes]) -> str:
    if proc.stderr is None:
        return ""
    try:
        text = proc.stderr.read(4096).decode(errors="replace")
    except (OSError, ValueError):
        return ""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return said(lines[-1] if lines else "", last=False)


def _release(proc: subprocess.Popen[bytes]) -> None:
    """End the lease: close the script's input (it removes its record and exits, dropping the flock)."""
    try:
        if proc.stdin is not None:
            proc.stdin.close()
    except OSError:
        pass
    try:
        proc.wait(timeout=RELEASE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        stop(proc)  # its ssh ends, and the lease with it
    for pipe in (proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()


@contextmanager
def remote_lease(
    shell: HostShell,
    key: str,
    run: str,
    wait: bool = False,
    timeout: float | None = None,
    progress: Progress | None = None,
    *,
    card: str | None = None,
    interval: float = 2.0,
) -> Iterator[Holder]:
    """Hold the card named by `key` (HOST.PCI) on the host `shell` reaches, for the block (as lease.lease)."""
    record = own_record(run)
    proc = take_waiting(
        lambda: _try_take(shell, key, record),
        card_name(key, card),
        lambda other: f"{_describe(other)}, on {shell.name}",
        wait,
        timeout,
        progress,
        interval,
        told=None,  # a holder that left no record is not said while waiting
    )
    try:
        yield record
    finally:
        _release(proc)


@contextmanager
def remote_leases(
    shells: Mapping[str, HostShell],
    keys: Sequence[str],
    run: str,
    wait: bool = False,
    timeout: float | None = None,
    progress: Progress | None = None,
    *,
    cards: Mapping[str, str] | None = None,
    interval: float = 2.0,
) -> Iterator[list[Holder]]:
    """Hold several cards, each on its host (`shells` by host name, the key's HOST part): sorted, as lease.leases."""
    with ExitStack() as stack:
        held = []
        for key in sorted(set(keys)):
            shell = shells[key.partition(".")[0]]
            card = (cards or {}).get(key)
            held.append(stack.enter_context(remote_lease(shell, key, run, wait, timeout, progress, card=card,
                                                         interval=interval)))  # fmt: skip
        yield held


@dataclass(frozen=True)
class HeldLease:
    key: str
    holder: Holder | None


def list_leases(shell: HostShell) -> list[HeldLease]:
    """The leases held on the host `shell` reaches (a flock held, whatever its record says)."""
    result = shell.run(LIST, shell.root, timeout=ANSWER_TIMEOUT_S, limit=1 << 20, what="listing its leases")
    lines = result.stdout.decode(errors="replace").split("\n")
    if result.returncode != 0 or "end" not in lines:
        raise NiclabError(
            f"lab host {shell.name}: listing its leases failed: {result.stderr or f'status {result.returncode}'}"
        )
    found = []
    for line in lines[: lines.index("end")]:
        tag, _, rest = line.partition("\t")
        key, _, text = rest.partition("\t")
        if tag != "held" or not LEASE_KEY.fullmatch(key):
            raise NiclabError(f"lab host {shell.name}: a lease listing line {shown(line)[:80]} is not one niclab reads")
        found.append(HeldLease(key, _holder(text)))
    return found
