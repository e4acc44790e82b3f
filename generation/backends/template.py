"""The template backend: a deterministic two-agent simulator built from STAR's own material.

No LLM. The *system* walks the task graph from ``hello`` and says each node's response template or
one of its phrasings from ``wizard_nlu_training_data.md``; it fills ``{placeholders}`` from the
values the user gave and from a knowledge-base item drawn from ``apis/dbs/<db>.json`` (STAR ships
the *schemas* of its knowledge bases, field names with categories and ranges, so the item is drawn
from that schema, consistent with the user's constraints); at query nodes it looks the request up
(happy scenarios succeed, unhappy ones succeed or fail by a seeded hash of the request) to take
the ``available``/``unavailable``, ``query_success``/``query_failure`` branch, and ``yes``/``no``
(and trivia's and trip's answers) follow what the user said. The *user* holds goal values taken
from the scenario text (``user_task``) and the task's API categories, opens with a greeting,
states the request when asked, answers each question with the slot asked for (several
phrasings), answers yes/no questions, sometimes chats off-topic (then the system's
``out_of_scope`` reply), and closes at ``anything_else``. All phrasing pools are in
``generation/template_data.yaml``.

Hallucinations, realised from system turn t_k on (the engine sets ``state.injected`` there):

* WIC: the system follows the substitute task's workflow (its happy path, starting at a step the
  original task does not have), with the variant's bridge sentence;
* SSPC: the variant's strategy applied to D+'s remaining steps (repeat a completed step, skip a
  required step, reverse, jump to the outcome then carry on, chaotic order);
* GR: a goal-replacement line of the variant, then the workflow's steps with the outcome steered
  to another value (``{alt}``) and pitches appended now and then;
* CSC: an auxiliary-goal line of the variant, then the workflow with the auxiliary goal
  intermittently prepended.

The user reacts (confusion, refusal, "I already told you", answering the odd question...). The
number of hallucinated steps matches D+'s remaining steps up to +-1 whatever k is, so forks are
not detectable by their length alone, and every fork's system turn t_k differs from D+'s (checked,
re-phrased if needed), so the ground truth is exact. Every choice is drawn from a SplitMix64
stream keyed by (dialogue seed, turn index): a replayed fork reproduces D+'s prefix exactly.

``reword`` prefix mode (``Dialogue.reword_rate``): each prefix turn of a fork is, with that
probability (drawn per dialogue seed, turn, type and k), realised with another phrasing of the same
dialogue act: the turn runs on a :class:`RewordRng`, which draws exactly what the plain stream draws
(same decisions, same workflow path, same state at t_k) but moves every phrasing pick to another
entry of its pool; a turn with a single surface form gets a discourse marker
(``template_data.yaml``: ``reword``) instead. Once a prefix turn is reworded, every later prefix
turn is reworded too, as in LLM replay where one changed turn changes the context of all later ones
(with independent per-turn rewording, counting identical turns would recover t_k exactly: the
leaderboard audit's pair-diffing attack). From t_k on the fork is the replayed fork.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..prompts import END_TOKEN
from ..seeds import Rng, stable_seed
from .base import TurnRequest

DATA_PATH = Path(__file__).resolve().parents[1] / "template_data.yaml"

_PH = re.compile(r"\{(\w+)(?::[^}]*)?\}")
_CAMEL = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")
_SECRET = {"PIN", "AccountNumber", "SecurityAnswer1", "SecurityAnswer2", "DateOfBirth", "Code"}
_PERSON = ("FullName", "RenterName", "PatientName", "CustomerName", "UserName", "GuestName", "HostName")
_POSITIVE = ("available", "query_success")
_NEGATIVE = ("unavailable", "query_failure")
_GENERIC = ("anything_else", "out_of_scope")

#: ask-node suffix (after the domain prefix and ``ask_``) -> API input slot. Unlisted suffixes
#: fall back to token overlap with the slot names.
ASK_ALIASES: dict[str, tuple[str, ...]] = {
    "name": ("PERSON",), "apartment_name": ("Name",), "day": ("Day",), "start_time": ("StartTimeHour",),
    "end_time": ("EndTimeHour",), "application_fee_paid": ("ApplicationFeePaid",), "custom_message": ("Message",),
    "account_number": ("AccountNumber",), "pin": ("PIN",), "dob": ("DateOfBirth",),
    "mothers_maiden_name": ("SecurityAnswer1",), "childhood_pets_name": ("SecurityAnswer2",),
    "fraud_details": ("FraudReport",), "doctor_name": ("Name",), "symptoms": ("Symptoms",), "hotel": ("Name",),
    "date_from": ("StartDate",), "date_to": ("EndDate",), "customer_request": ("CustomerRequest",),
    "room_number": ("RoomNumber",), "service_request": ("CustomerRequest",),
    "time": ("Time", "StartTimeHour", "ArrivalTime", "DepartureTime"), "guest_name": ("Name",),
    "reason": ("MeetingReason",), "venue": ("Name",), "number_of_guests": ("NumberGuests",),
    "starting_time": ("StartTimeHour",), "host": ("HostName",), "arrival_time": ("ArrivalTime",),
    "parking_needed": ("NeedParking",), "dietary_restrictions": ("DietaryRestrictions",), "flight_id": ("id",),
    "departure_city": ("DepartureCity",), "arrival_city": ("ArrivalCity",), "date": ("Date",),
    "restaurant": ("Name",), "size": ("PartySize",), "destination": ("ArrivalLocation",),
    "departure": ("DepartureLocation",), "booking_number": ("id",), "change": ("ChangeDescription",),
    "rank": ("UserRank",), "code": ("Code",), "code_type": ("CodeType",), "lock_manufacturer": ("LockManufacturer",),
    "colour_top_cable": ("ColorOfTopCable",), "colour_second_cable": ("ColorOfSecondCable",),
    "travel_mode": ("TravelMode",), "departure_location": ("DepartureLocation",),
    "arrival_location": ("ArrivalLocation",), "departure_time": ("DepartureTime",),
    "question_number": ("QuestionNum",), "location": ("City", "Location"), "food": ("FoodRequest",),
    "drinks": ("DrinksRequest",), "num_bedrooms": ("NumRooms",), "price": ("Price",), "floor": ("Level",),
    "balcony": ("HasBalcony",), "elevator": ("HasElevator",), "nearby_pois": ("NearbyPOIs",),
    "food_type": ("Food",), "rating": ("AverageRating",), "delivery": ("DoesDelivery",),
    "takes_reservations": ("TakesReservations",),
}
#: placeholder -> knowledge-base field, where the names differ.
PH_ALIASES: dict[str, str] = {
    "size": "FloorSquareMeters", "num_bedrooms": "NumRooms", "floor": "Level", "pois": "NearbyPOIs",
    "temperature": "TemperatureCelsius", "balance": "BankBalance", "clazz": "Class", "duration": "DurationHours",
    "price_range": "Cost", "average_rating": "AverageRating", "rating": "AverageRating", "food_type": "Food",
    "hotel_location": "Location", "booking_id": "id", "end_time": "EndTimeHour", "start_time": "StartTimeHour",
    "flight_id": "id",
}
_BAD = re.compile(r"unavailable|failed|cannot|nothing|not_available|no_venue")
_DYNAMIC = frozenset({"question", "answer", "simple_instruction", "detailed_instruction"})
_FREE_KEYS = (("message", "message"), ("symptom", "symptoms"), ("request", "request"), ("fraud", "fraud"),
              ("reason", "reason"), ("food", "food"), ("drink", "drinks"), ("dietary", "dietary"),
              ("change", "change"))


@lru_cache(maxsize=4)
def load_template_data(path: str = str(DATA_PATH)) -> dict[str, Any]:
    import yaml

    with open(path, encoding="utf-8") as fh:
        data = yaml.safe_load(fh)
    if not isinstance(data, dict) or "user" not in data or "version" not in data:
        raise ValueError(f"{path}: not a template-backend data file (needs 'version' and 'user')")
    return data


def _norm(s: str) -> str:
    return re.sub(r"[^a-z0-9]", "", s.lower())


def _clean_phrasing(p: str) -> str:
    return re.sub(r"\[([^\]]+)\]\([^)]+\)", r"\1", p).strip()


def _plain(p: str) -> bool:
    """An NLU phrasing usable in any dialogue: no proper noun beyond the first word (they name
    hotels/people of some other dialogue), no stray markup."""
    if not p or any(c in p for c in "<>{}#*") or len(p) < 4:
        return False
    words = re.findall(r"[A-Za-z']+", p)[1:]
    return not any(w[0].isupper() and w not in ("I", "I'm", "I'll", "I've", "PIN", "ID") for w in words)


def _swap_person(p: str) -> str:
    repl = {"you": "me", "your": "my", "yours": "mine"}
    return re.sub(r"\b(you|your|yours)\b", lambda m: repl[m.group(1)], p)


class RewordRng(Rng):
    """The turn's random stream with a surface shift (``reword`` prefix mode): every phrasing choice
    (a node's phrasing, a user pool's template) moves to another entry of the same pool, while every
    draw stays the same, so the simulator takes the same decisions (same dialogue acts, same
    workflow path) and only the surface form changes."""

    __slots__ = ("shift",)

    def __init__(self, seed: int, *salt: int, shift: int = 1):
        super().__init__(seed, *salt)
        self.shift = shift


def _pick(rng: Rng, n: int) -> int:
    """Index of a phrasing among ``n``: one draw; shifted to another index under :class:`RewordRng`."""
    i = rng.below(n)
    if rng.__class__ is RewordRng and n > 1:
        i = (i + 1 + rng.shift % (n - 1)) % n
    return i


class Slot:
    __slots__ = ("name", "readable", "type", "categories", "min", "max", "secret", "free", "examples")

    def __init__(self, spec: dict[str, Any]):
        self.name = spec["Name"]
        self.readable = (spec.get("ReadableName") or " ".join(_CAMEL.findall(self.name))).lower()
        t = (spec.get("Type") or "").lower()
        self.type = ("cat" if t.startswith("cat") else "int" if t.startswith("int") else
                     "bool" if t.startswith("bool") else "long" if t.startswith("long") else "text")
        cats = spec.get("Categories") or ()
        if isinstance(cats, str):  # e.g. '!list(combinations(["School", "Park", ...], 2))'
            names = re.findall(r'"([^"]+)"', cats)
            cats = [f"{a} and {b}" for i, a in enumerate(names) for b in names[i + 1:]] if "combinations" in cats else names
        self.categories = tuple(str(c) for c in cats if not isinstance(c, (list, dict)))
        self.min, self.max = spec.get("Min"), spec.get("Max")
        self.secret = self.name in _SECRET
        low = self.name.lower()
        self.free = next((k for key, k in _FREE_KEYS if key in low), "generic")
        self.examples = tuple(str(x) for x in spec.get("Examples") or ())
        """Example values (a workflow file's ``examples``) for a user whose scenario gives none."""


class TaskModel:
    """Everything the simulator needs about one task, precomputed once per process."""

    def __init__(self, task: Any, dbs: dict[str, Any], data: dict[str, Any]):
        self.task = task
        self.name = task.name
        self.domain = task.domain
        self.graph: dict[str, str] = dict(task.graph)
        self.kinds: dict[str, str] = dict(task.kinds)
        self.children: dict[str, list[str]] = {}
        for b, ps in task.branch_parents.items():
            for p in ps:
                self.children.setdefault(p, []).append(b)
        self.start = task.start_node
        acts = getattr(task, "user_acts", None)  # a workflow file's own surface templates of user acts
        self.data = {**data, "user": {**data["user"], **acts}} if acts else data
        api = task.api
        self.slots: dict[str, Slot] = {s["Name"]: Slot(s) for s in (api.inputs if api else [])}
        if not any(p in self.slots for p in _PERSON) and "ask_name" in task.replies:
            # the workflow asks for the user's name but the API has no such input: simulate one
            self.slots["UserName"] = Slot({"Name": "UserName", "Type": "ShortString", "ReadableName": "Name"})
        self.db_fields: dict[str, Slot] = {}
        db = (dbs.get(api.db) if api and api.db else None) or dbs.get(task.domain)
        if isinstance(db, list):
            for f in db:
                if isinstance(f, dict) and "Name" in f:
                    self.db_fields.setdefault(_norm(f["Name"]), Slot(f))
        self.db_raw = db if isinstance(db, list) else []
        # phrasings
        self.phr: dict[str, tuple[str, ...]] = {}
        self.has_ph: dict[str, bool] = {}
        for n, k in self.kinds.items():
            if k != "action":
                continue
            tpl = task.template(n) or task.replies.get(n) or ""
            tpl = tpl.replace("\n", " ").replace("  ", " ").strip()
            if not tpl:
                continue
            ph = bool(_PH.search(tpl))
            if getattr(task, "curated_phrasings", False):  # written for the task (workflow file): as they are
                self.phr[n] = (tpl,) + tuple(dict.fromkeys(a.strip() for a in task.nlu.get(n, ()) if a.strip() != tpl))
                self.has_ph[n] = ph or any(_PH.search(a) for a in self.phr[n])
                continue
            alts = () if ph else tuple(x for x in (_clean_phrasing(p) for p in task.nlu.get(n, ())) if _plain(x))
            alts = tuple(a[:1].upper() + a[1:] for a in alts)
            if "bye" in n:
                alts = tuple(a for a in alts if re.search(r"bye|good day|take care", a, re.I))
            elif n == task.start_node:
                alts = tuple(a for a in alts if "want" not in a.lower())
            self.phr[n] = (tpl,) + tuple(dict.fromkeys(a for a in alts if a != tpl))
            self.has_ph[n] = ph
        self.anything_else = "anything_else" if "anything_else" in self.phr else None
        self.confirms = {n for n, ph in self.phr.items() if "confirm" in n.split("_") and ph[0].rstrip().endswith("?")}
        byes = [n for n in self.phr if "bye" in n]
        no_target = self.graph.get("no")
        self.bye = (no_target if no_target and "bye" in no_target else (sorted(byes, key=len)[0] if byes else None))
        # ask nodes -> slots
        self.ask_slot: dict[str, Slot | None] = {}
        self.ask_readable: dict[str, str] = {}
        person = next((self.slots[p] for p in _PERSON if p in self.slots), None)
        for n in self.phr:
            words = n.split("_")
            if "ask" not in words or "confirm" in words or set(self.children.get(n, ())) & {"yes", "no", "done"}:
                continue
            i = words.index("ask")
            key = "_".join(words[i + 1:])
            self.ask_readable[n] = key.replace("_", " ") or "details"
            slot = None
            for cand in ASK_ALIASES.get(key, ()):
                if cand == "PERSON":
                    slot = person or self.slots.get("Name")
                elif cand in self.slots:
                    slot = self.slots[cand]
                if slot is not None:
                    break
            if slot is None and key:
                toks = set(key.split("_"))
                best = max(self.slots.values(), default=None,
                           key=lambda s: len(toks & set(s.readable.split())))
                if best is not None and toks & set(best.readable.split()):
                    slot = best
            self.ask_slot[n] = slot
        for n, name in (getattr(task, "asks", None) or {}).items():  # explicit (workflow file: ``ask``)
            if n in self.phr and name in self.slots:
                self.ask_slot[n] = self.slots[name]
                self.ask_readable[n] = self.slots[name].readable
        # request phrase from the out_of_scope reply ("I am only able to tell you the weather.")
        oos = task.replies.get("out_of_scope", "")
        m = re.search(r"only able to (.+?)\.?$", oos)
        self.request = _swap_person(m.group(1)) if m else f"help me with {self.name.replace('_', ' ')}"
        if getattr(task, "request", None):
            self.request = task.request
        self.service = self.name.replace("_", " ")
        self.is_search_more = {n for n, ks in self.children.items()
                               if set(ks) >= {"yes", "no"} and "bye" in (self.graph.get("no") or "")}
        self.loops = {n for n, ks in self.children.items() if "yes" in ks and self.graph.get("yes") == n}
        self.other_asks = tuple(n for n in task.other_nodes() if n in self.ask_slot and n in self.phr)
        # the slot that identifies what the user wants (GR steers it elsewhere): a categorical slot,
        # else a numeric id (a flight, a ride, a question number)
        self.identity = next((s for s in self.slots.values() if s.type == "cat" and s.name in ("Name", "City", "Day")),
                             next((s for s in self.slots.values() if s.type == "cat"),
                                  next((s for s in self.slots.values()
                                        if s.type == "int" and (s.name == "id" or "Num" in s.name)), None)))
        # trip routes (apis/dbs/trip.json): simple steps and their detailed versions per travel mode
        self.routes: dict[str, list[tuple[list[str], list[str]]]] = {}
        for f in self.db_raw:
            if isinstance(f, dict) and str(f.get("Name", "")).endswith("Instructions") \
                    and not str(f.get("Name")).startswith("Detailed"):
                mode = str(f["Name"])[: -len("Instructions")]
                rs = []
                for r in f.get("Categories") or []:
                    if isinstance(r, list):
                        simple = [x for x in r if not x.startswith("#")]
                        detailed = [x[1:] for x in r if x.startswith("#")]
                        rs.append((simple, detailed))
                if rs:
                    self.routes[mode] = rs
        self.happy_trace: tuple[str, ...] = ()
        self.outcome: str | None = None

    def is_ask(self, n: str) -> bool:
        return n in self.ask_slot


# --------------------------------------------------------------------------------------------
# the simulator
# --------------------------------------------------------------------------------------------


class Sim:
    """Per-dialogue simulator state (kept in ``Dialogue.scratch['sim']``)."""

    __slots__ = ("m", "data", "goal", "unknown", "given", "kb", "prev", "answer", "trace", "visits",
                 "after_query", "loop", "unknown_pending", "n_more", "n_no_confirm", "trip_i", "trip_route",
                 "trivia_i", "trivia_n", "trivia_known", "chat_at", "hal", "scenario_happy", "rejected",
                 "user_task", "name", "seed")

    def __init__(self, m: TaskModel, scenario: Any, seed: int, data: dict[str, Any], goal_seed_salt: int = 0):
        self.m = m
        self.data = getattr(m, "data", data)
        self.seed = seed
        self.scenario_happy = bool(scenario.happy)
        self.user_task = scenario.user_task or ""
        goal, unknown = _cached_goal(m, self.user_task, seed + goal_seed_salt, data)
        self.goal, self.unknown = dict(goal), unknown
        values = getattr(scenario, "slot_values", None)  # a workflow scenario's own values win
        if values:
            self.goal.update({k: v for k, v in values.items() if k in m.slots})
        self.given: dict[str, str] = {}
        self.kb: dict[str, str] = {}
        self.prev: str | None = None
        self.answer: str | None = None
        self.trace: list[str] = []
        self.visits: dict[str, int] = {}
        self.after_query: str | None = None
        self.loop: str | None = None
        self.unknown_pending = False
        self.n_more = 0
        self.n_no_confirm = 0
        self.trip_i = 0
        self.trip_route: tuple[list[str], list[str]] | None = None
        self.trivia_i = 0
        self.trivia_n = 0
        self.trivia_known: set[int] = set()
        r = Rng(seed, 77)
        self.chat_at = (3 + r.below(4)) if (scenario.user_guide and r.below(3) == 0) else -1
        self.hal: Hal | None = None
        self.rejected: set[str] = set()
        person = next((p for p in _PERSON if p in self.goal), None)
        self.name = self.goal.get(person, "") if person else ""

    # ---- values
    def value(self, ph: str, rng: Rng, alt: bool = False) -> str:
        if ph in _DYNAMIC:
            return _placeholder_value(self, ph, rng, alt)
        key = ph + ("#alt" if alt else "")
        v = self.kb.get(key)
        if v is None:
            # a knowledge-base fact: seeded by (dialogue, placeholder), not by turn, so that it is the
            # same whenever (and in whichever fork) it is said
            v = _placeholder_value(self, ph, Rng(self.seed, zlib.crc32(key.encode())), alt)
            self.kb[key] = v
        return v

    def fill(self, text: str, rng: Rng, alt: bool = False) -> str:
        return _PH.sub(lambda mm: self.value(mm.group(1), rng, alt), text)

    def realise(self, node: str, rng: Rng, alt: bool = False, avoid: str | None = None) -> str:
        m = self.m
        phr = m.phr.get(node)
        if not phr:
            return node.replace("_", " ").capitalize() + "."
        text = phr[_pick(rng, len(phr))] if len(phr) > 1 else phr[0]
        if m.has_ph.get(node):
            text = self.fill(text, rng, alt).replace("the The ", "The ")
        if avoid is not None and text == avoid:
            for p in phr:
                cand = self.fill(p, rng, alt) if m.has_ph.get(node) else p
                if cand != avoid:
                    return cand
        return text

    # ---- graph walk
    def resolve(self, n: str | None, rng_seed: int) -> str | None:
        m = self.m
        guard = 0
        while n is not None and m.kinds.get(n) in ("query", "branch") and guard < 20:
            guard += 1
            if m.kinds[n] == "query":
                kids = m.children.get(n)
                q = n
                if kids:
                    b = self.kb_outcome(q, kids, rng_seed)
                    n = m.graph.get(b)
                else:
                    n = m.graph.get(q)
                self.after_query = n if n is not None else self.after_query
            else:
                n = m.graph.get(n)
        return n

    def kb_outcome(self, q: str, kids: Sequence[str], rng_seed: int) -> str:
        pos = next((k for k in kids if k in _POSITIVE), None)
        neg = next((k for k in kids if k in _NEGATIVE), None)
        if pos is None or neg is None:
            return kids[0]
        if self.scenario_happy:
            return pos
        req = "|".join(f"{k}={v}" for k, v in sorted(self.given.items()))
        return pos if stable_seed(self.m.name, q, req, rng_seed) % 3 else neg

    def transition(self, seed: int) -> str | None:
        """The next node after ``prev`` given the user's ``answer``."""
        m, prev, ans = self.m, self.prev, self.answer
        if prev is None:
            return m.start
        if prev == m.anything_else or (m.bye and prev == m.bye):
            return m.bye if prev != m.bye else None
        nxt = None
        kids = m.children.get(prev)
        took_branch = False
        if kids:
            if ans in kids:
                b = ans
            elif ans == "no" and "done" in kids:
                b = "done"
            elif ans == "yes" and "yes" not in kids and self.after_query:
                b = None
                nxt = self.after_query
                took_branch = True
            elif not set(kids) & {"yes", "no", "done", "correct", "incorrect", "noanswer"} and self.unknown_pending:
                b = kids[0]
                self.unknown_pending = False
            else:
                b = None
            if b is not None:
                took_branch = True
                if prev in m.loops:
                    self.loop = prev
                nxt = m.graph.get(b)
                if nxt is None and b in ("yes",) and prev in m.loops:
                    nxt = prev
        if not took_branch:
            nxt = m.graph.get(prev)
        nxt = self.resolve(nxt, seed)
        if nxt is None:
            if self.loop is not None and prev != self.loop and self.visits.get(self.loop, 0) < 8:
                nxt = self.loop
            else:
                nxt = m.anything_else or m.bye
        if nxt is not None and self.visits.get(nxt, 0) >= 6:
            nxt = m.anything_else or m.bye
        return nxt


class Hal:
    """A fork's hallucination plan (built at system turn t_k)."""

    __slots__ = ("htype", "variant", "body", "pos", "sub", "missing", "lines", "replies", "closing", "ask_more",
                 "spec")

    def __init__(self, htype: str, variant: Any, spec: Any = None):
        self.spec = spec
        """The engine's ForkSpec this plan realises (a compound fork's next injection replaces it)."""
        self.htype = htype
        self.variant = variant
        self.body: list[tuple[str, Any]] = []
        self.pos = 0
        self.sub: Sim | None = None
        self.missing: list[str] = []
        self.lines: tuple[str, ...] = tuple(variant.template.get("lines", ()) or ())
        self.replies: tuple[str, ...] = tuple(variant.template.get("user_replies", ()) or ())
        self.closing = 0
        self.ask_more = True
        """Whether the closing starts with ``anything_else`` (as D+'s did) or goes straight to goodbye."""


# --------------------------------------------------------------------------------------------
# values
# --------------------------------------------------------------------------------------------


def _find_category(cats: Sequence[str], text: str) -> str | None:
    """The category mentioned first in ``text`` (whole words, case-insensitive), if any."""
    best: tuple[int, str] | None = None
    low = text.lower()
    for c in cats:
        cl = c.lower()
        i = low.find(cl)
        while i >= 0:
            before = low[i - 1] if i > 0 else " "
            after = low[i + len(cl)] if i + len(cl) < len(low) else " "
            if not before.isalnum() and not after.isalnum():
                if best is None or i < best[0] or (i == best[0] and len(c) > len(best[1])):
                    best = (i, c)
                break
            i = low.find(cl, i + 1)
    return best[1] if best else None


_GOAL_CACHE: dict[tuple[int, str, int], tuple[dict[str, str], frozenset[str]]] = {}


def _cached_goal(m: TaskModel, text: str, seed: int, data: dict[str, Any]) -> tuple[dict[str, str], frozenset[str]]:
    """Goal values of (task, scenario text, seed); the 17 dialogues of a scenario share them."""
    key = (id(m), text, seed)
    hit = _GOAL_CACHE.get(key)
    if hit is None:
        if len(_GOAL_CACHE) > 4096:
            _GOAL_CACHE.clear()
        goal, unknown = _goal_values(m, text, seed, data)
        hit = _GOAL_CACHE[key] = (goal, frozenset(unknown))
    return hit


def _goal_values(m: TaskModel, text: str, seed: int, data: dict[str, Any]) -> tuple[dict[str, str], set[str]]:
    rng = Rng(seed, 11)
    goal: dict[str, str] = {}
    unknown: set[str] = set()
    forgot = bool(re.search(r"forg|don't remember|do not remember|can't remember|cannot remember", text, re.I))
    names = re.findall(r"(?:You are|Your are|You \(|[Yy]our name is|I am) ?([A-Z][a-z]+(?: [A-Z][a-z]+)?)", text)
    for s in m.slots.values():
        v: str | None = None
        if s.type == "cat" and s.categories:
            if s.name == "ApplicationFeePaid" or set(c.lower() for c in s.categories) <= {"yes", "no"}:
                v = "No" if re.search(r"not (yet )?paid|haven't paid", text, re.I) else s.categories[0]
            else:
                v = _find_category(s.categories, text)
                if s.name == "ArrivalCity" and v is not None and goal.get("DepartureCity") == v:
                    v = None
                if s.name.startswith("End") and v is not None and goal.get("Start" + s.name[3:]) == v:
                    v = None
                if v is None and s.name.startswith("End") and goal.get("Start" + s.name[3:]) in s.categories:
                    i = s.categories.index(goal["Start" + s.name[3:]])
                    v = s.categories[(i + 1 + rng.below(2)) % len(s.categories)]
            if v is None:
                pool = [c for c in s.categories if c not in goal.values()] or list(s.categories)
                v = pool[rng.below(len(pool))]
        elif s.name in _PERSON or (s.name == "Name" and s.type == "text"):
            if s.name in ("HostName",) and m.name == "party_rsvp":
                mm = re.search(r"host(?:ed)? (?:is |by )?([A-Z][a-z]+)", text)
                v = mm.group(1) if mm else data["names"][rng.below(len(data["names"]))]
            elif names:
                v = names[0]
            else:
                v = data["names"][rng.below(len(data["names"]))]
            if s.name == "FullName" and " " not in v:
                v = f"{v} {data['surnames'][rng.below(len(data['surnames']))]}"
        else:
            v = _text_value(s, text, rng, data)
            if v is None:
                if s.secret and forgot:
                    unknown.add(s.name)
                v = rng.choice(s.examples) if s.examples else _invent(s, rng, data, goal)
        goal[s.name] = v
    return goal, unknown


_DIGITS = {"PIN": 4, "AccountNumber": 9, "Code": 6, "id": 3, "RoomNumber": 3}


def _text_value(s: Slot, text: str, rng: Rng, data: dict[str, Any]) -> str | None:
    r = re.escape(s.readable)
    if s.name == "id":
        mm = re.search(r"\b(?:id|ID|Id)(?: is)? (\d+)", text)
        return mm.group(1) if mm else None
    if s.name in ("DepartureLocation", "ArrivalLocation"):
        mm = re.search(r"from '?([^'.,]+?)'? to '?([^'.,]+?)'?(?: at|[.,]| by|$)", text)
        if mm:
            return mm.group(1 if s.name.startswith("Departure") else 2).strip()
        return None
    if s.name == "SecurityAnswer1":
        mm = re.search(r"maiden name is (\w+)", text)
        return mm.group(1) if mm else None
    if s.name == "SecurityAnswer2":
        mm = re.search(r"pet (?:is|was)(?: called| named)? (\w+)", text)
        return mm.group(1) if mm else None
    if s.name == "DateOfBirth":
        mm = re.search(r"(?:date of birth is|born on) ([\d/.\-]+|\w+ \d+(?:st|nd|rd|th)?,? \d{4})", text)
        return mm.group(1) if mm else None
    if s.name == "QuestionNum":
        mm = re.search(r"question (\d+)", text)
        return mm.group(1) if mm else None
    if s.name == "NumberGuests" or s.name == "PartySize":
        mm = re.search(r"(\d+) (?:guests|people|persons|friends)", text)
        return mm.group(1) if mm else None
    if s.type == "long" or s.free != "generic":
        mm = re.search(r"(?:request|reason|message) is:? '?([^'\n]+?)'?(?:\.$|\.\s|$)", text)
        return mm.group(1).strip() if mm else None
    mm = re.search(rf"{r}(?: number)? (?:is|:) ?'?([A-Za-z0-9][\w /.-]*?)'?(?:[.,;]\s|[.,;]?$| and )", text, re.I)
    if mm:
        return mm.group(1).strip()
    if s.name in _DIGITS:
        mm = re.search(rf"{re.escape(s.name)}\D{{0,12}}(\d+)", text, re.I)
        if mm:
            return mm.group(1)
    return None


def _invent(s: Slot, rng: Rng, data: dict[str, Any], goal: dict[str, str]) -> str:
    n = s.name
    if n in _DIGITS:
        k = _DIGITS[n]
        return str(10 ** (k - 1) + rng.below(9 * 10 ** (k - 1)))
    if s.type == "int":
        lo = s.min if isinstance(s.min, int) else 1
        hi = s.max if isinstance(s.max, int) else max(lo + 9, 10)
        if n in ("NumberGuests", "PartySize"):
            lo, hi = 2, 8
        return str(lo + rng.below(max(hi - lo + 1, 1)))
    if s.type == "bool":
        return "yes" if rng.below(2) else "no"
    if n == "DateOfBirth":
        return f"{1 + rng.below(28):02d}/{1 + rng.below(12):02d}/{1950 + rng.below(50)}"
    if n == "SecurityAnswer1":
        return rng.choice(data["maiden_names"])
    if n == "SecurityAnswer2":
        return rng.choice(data["pets"])
    if "Color" in n:
        used = set(goal.values())
        pool = [c for c in data["colours"] if c not in used] or data["colours"]
        return rng.choice(pool)
    if "Manufacturer" in n:
        return rng.choice(data["manufacturers"])
    if "Location" in n:
        used = set(goal.values())
        pool = [p for p in data["places"] if p not in used] or data["places"]
        return rng.choice(pool)
    free = data["free_text"].get(s.free) or data["free_text"]["generic"]
    return rng.choice(free)


def _placeholder_value(sim: Sim, ph: str, rng: Rng, alt: bool) -> str:
    m = sim.m
    data = sim.data
    n = _norm(ph)
    if ph == "question":
        qs = data["trivia_questions"]
        return qs[(sim.trivia_i - 1) % len(qs)]
    if ph == "answer":
        return _trivia_answer(sim, sim.trivia_i)
    if ph in ("simple_instruction", "detailed_instruction"):
        route = sim.trip_route or ([], [])
        steps = route[0] if ph == "simple_instruction" else (route[1] or route[0])
        if not steps:
            return "Head straight on."
        i = min(max(sim.trip_i - 1, 0), len(steps) - 1)
        step = steps[i].strip()
        return step if step.endswith((".", "!", "?")) else step + "."
    if n.startswith("has") and len(n) > 3:
        thing = ph[4:].replace("_", " ")
        val = sim.goal.get("Has" + "".join(w.capitalize() for w in thing.split()))
        yes = (val == "yes") if val is not None else bool(rng.below(2))
        return f"has {'an' if thing[:1] in 'aeiou' else 'a'} {thing}" if yes else f"does not have {'an' if thing[:1] in 'aeiou' else 'a'} {thing}"
    if ph == "message" or ph == "instructions":
        pool = data["messages"].get(m.name) or data["messages"]["default"]
        return pool[rng.below(len(pool))]
    alias = PH_ALIASES.get(ph)
    if alias is not None:
        n = _norm(alias)
    stripped = n[len(m.domain):] if n.startswith(m.domain) and len(n) > len(m.domain) else n
    slot = None
    for s in m.slots.values():
        sn = _norm(s.name)
        if sn in (n, n + "hour", stripped) or (n.endswith("name") and sn == "name" and s.type == "cat") \
                or (n.endswith("id") and sn == "id"):
            slot = s
            break
    if slot is None and n == "time":
        slot = next((m.slots[k] for k in ("Time", "StartTimeHour", "ArrivalTime", "DepartureTime") if k in m.slots), None)
    if slot is not None:
        v = sim.given.get(slot.name) or sim.goal.get(slot.name, "")
        if alt and slot is m.identity and slot.categories:
            others = [c for c in slot.categories if c != v]
            if others:
                return others[rng.below(len(others))]
        if v:
            return v
    if alt:  # only the goal's identity slot is steered (GR); every other fact stays as in D+
        return sim.value(ph, rng, False)
    f = m.db_fields.get(n) or next((f for k, f in m.db_fields.items() if k.startswith(n) or k.endswith(n)), None)
    if f is not None:
        if f.type == "cat" and f.categories:
            cats = f.categories
            return str(cats[rng.below(len(cats))])
        if f.type == "int":
            lo = f.min if isinstance(f.min, int) else 1
            hi = f.max if isinstance(f.max, int) else lo + 99
            return str(lo + rng.below(max(hi - lo + 1, 1)))
        if f.type == "bool":
            return "yes" if rng.below(2) else "no"
    if n.endswith("name"):
        return rng.choice(data["names"])
    if "plate" in n:
        return f"{chr(65 + rng.below(26))}{chr(65 + rng.below(26))} {100 + rng.below(900)}"
    if n.endswith("id") or "number" in n:
        return str(1000 + rng.below(9000))
    if "status" in n:
        return rng.choice(("on its way", "arriving in 5 minutes", "waiting at the pick-up point"))
    if "instruction" in n:
        return rng.choice(("take the medicine twice a day after meals", "rest for a week and drink plenty of water",
                           "take one pill every morning for ten days"))
    if "outcome" in n or "result" in n:
        return rng.choice(("the door is now unlocked", "access granted", "the lock is open"))
    return rng.choice(("the requested one", "as requested", "the one you asked for"))


def _trivia_answer(sim: Sim, i: int) -> str:
    ans = None
    for f in sim.m.db_raw:
        if isinstance(f, dict) and f.get("Name") == "Answer":
            ans = f.get("Categories") or []
    if not ans:
        return "I don't know"
    a = str(ans[(i - 1) % len(ans)])
    return re.sub(r"^\(\d+\)\s*", "", a)


# --------------------------------------------------------------------------------------------
# user and system turns
# --------------------------------------------------------------------------------------------


def _u(data: dict[str, Any], key: str, rng: Rng, **kw: str) -> str:
    pool = data["user"][key]
    text = pool[_pick(rng, len(pool))]
    if not kw:
        return text
    text = text.format(**{k: v.rstrip(".") for k, v in kw.items()})
    return text.replace("..", ".").replace(".?", "?").replace(".,", ",")


def _answer_slot(sim: Sim, node: str, slot: Slot | None, rng: Rng) -> str:
    data = sim.data
    m = sim.m
    if slot is None:
        r = m.ask_readable.get(node, "details")
        v = _invent_free(r, rng, data)
        return _u(data, "answer", rng, v=v, r=r) if rng.below(2) else v
    readable = m.ask_readable.get(node) or slot.readable
    if slot.name in sim.unknown and slot.name not in sim.given:
        sim.unknown_pending = True
        sim.given[slot.name] = "?"
        return _u(data, "unknown", rng, r=readable)
    v = sim.goal.get(slot.name, "")
    if slot.name in sim.rejected and slot.type == "cat":
        others = [c for c in slot.categories if c != v]
        if others:
            v = others[rng.below(len(others))]
            sim.goal[slot.name] = v
    sim.given[slot.name] = v
    if slot.type == "bool":
        return _u(data, "yes" if v == "yes" else "no", rng)
    if slot.type == "long" or slot.free != "generic":
        return v
    return _u(data, "answer", rng, v=v, r=readable)


def _invent_free(readable: str, rng: Rng, data: dict[str, Any]) -> str:
    for key, k in _FREE_KEYS:
        if key in readable:
            return rng.choice(data["free_text"][k])
    return rng.choice(data["free_text"]["generic"])


def _criteria(sim: Sim, rng: Rng) -> str:
    """The user's reply to an 'I can filter by ...' message: one or two of its constraints."""
    m = sim.m
    cands = [s for s in m.slots.values() if s.type in ("cat", "int", "bool") and s.name not in sim.given]
    if not cands:
        cands = [s for s in m.slots.values() if s.type in ("cat", "int")]
    if not cands:
        return _u(sim.data, "ack", rng)
    s = cands[rng.below(len(cands))]
    v = sim.goal.get(s.name, "")
    sim.given[s.name] = v
    if s.type == "bool":
        phrase = s.readable.replace("has ", "a ") if v == "yes" else f"no {s.readable.replace('has ', '')}"
    elif s.type == "int":
        phrase = f"{s.readable} {v}"
    else:
        phrase = v
    return _u(sim.data, "criteria", rng, v=phrase)


def user_turn(sim: Sim, d: Any, rng: Rng) -> str:
    m, data = sim.m, sim.data
    sim.answer = None
    if d.wrapped:
        return _u(data, "wrap", rng) + " " + END_TOKEN
    n_turns = len(d.turns)
    if n_turns == 0:
        return _u(data, "greeting", rng)
    prev = sim.prev
    if sim.hal is not None and sim.hal.closing == 0 and sim.hal.pos > 0:
        return _hal_user(sim, d, rng)
    if n_turns == sim.chat_at and prev not in (m.start, m.anything_else):
        sim.answer = "chat"
        return _u(data, "chit_chat", rng)
    if prev == m.start:
        return _u(data, "request", rng, p=sim.m.request)
    if prev == m.anything_else:
        sim.answer = "close"
        return _u(data, "close", rng)
    if prev in m.is_search_more:
        if sim.n_more == 0 and not sim.scenario_happy and rng.below(3) == 0:
            sim.n_more += 1
            sim.answer = "yes"
            return _u(data, "more_yes", rng)
        sim.answer = "no"
        return _u(data, "more_no", rng)
    kids = m.children.get(prev) or ()
    if "correct" in kids:  # trivia question
        known = sim.trivia_i in sim.trivia_known
        r = rng.below(4)
        if known or r < 2:
            sim.answer = "correct"
            return _trivia_answer(sim, sim.trivia_i).capitalize() + "."
        if r == 2:
            sim.answer = "noanswer"
            return "I don't know."
        sim.answer = "incorrect"
        return _trivia_answer(sim, sim.trivia_i + 3).capitalize() + "?"
    if "done" in kids and "yes" not in kids:  # trivia: continue playing?
        if sim.trivia_n > 1:
            sim.trivia_n -= 1
            sim.answer = "yes"
            return _u(data, "yes", rng)
        sim.answer = "no"
        return _u(data, "more_no", rng)
    if "done" in kids:  # trip step
        route = sim.trip_route or ([], [])
        if sim.trip_i >= len(route[0]):
            sim.answer = "done"
            return _u(data, "trip_done", rng)
        if rng.below(4) == 0:
            sim.answer = "no"
            return _u(data, "trip_no", rng)
        sim.answer = "yes"
        return _u(data, "trip_yes", rng)
    if "yes" in kids:
        if prev in ("meeting_inform_unavailable_ask_different_time",) or "different" in prev:
            if sim.n_no_confirm == 0:
                sim.n_no_confirm += 1
                sim.answer = "yes"
                if m.identity is not None:
                    sim.rejected.add("StartTimeHour" if "StartTimeHour" in m.slots else m.identity.name)
                return _u(data, "yes", rng)
            sim.answer = "no"
            return _u(data, "no", rng)
        if not sim.scenario_happy and sim.n_no_confirm == 0 and rng.below(3) == 0:
            sim.n_no_confirm += 1
            sim.answer = "no"
            if m.identity is not None:
                sim.rejected.add(m.identity.name)
            return _u(data, "no", rng)
        sim.answer = "yes"
        return _u(data, "yes", rng)
    if prev in m.ask_slot:
        return _answer_slot(sim, prev, m.ask_slot[prev], rng)
    if prev in m.confirms:
        sim.answer = "yes"
        return _u(data, "yes", rng)
    if prev == "out_of_scope":
        return _u(data, "request", rng, p=m.request)
    if prev is not None and "search_criteria" in prev or (prev is not None and prev.endswith("request_optional")):
        return _criteria(sim, rng)
    return _u(data, "ack_bad" if prev is not None and _BAD.search(prev) else "ack", rng)


def system_turn(sim: Sim, d: Any, rng: Rng, seed: int) -> str:
    m = sim.m
    if d.wrapped:
        sim.trace.append(m.bye or "bye")
        return _bye(sim, rng) + " " + END_TOKEN
    if sim.answer == "chat":
        sim.answer = None
        sim.trace.append("out_of_scope")
        # the out-of-scope reply, then the pending question again
        text = sim.realise("out_of_scope", rng) if "out_of_scope" in m.phr else "Sorry?"
        if sim.prev is not None and sim.prev in m.phr and sim.prev not in _GENERIC:
            if not text.endswith((".", "?", "!")):
                text += "."
            text += " " + sim.realise(sim.prev, rng)
        return text
    node = sim.transition(seed)
    if node is None:
        sim.trace.append("bye")
        return _bye(sim, rng) + " " + END_TOKEN
    sim.prev = node
    sim.visits[node] = sim.visits.get(node, 0) + 1
    sim.trace.append(node)
    _enter(sim, node, rng)
    text = sim.realise(node, rng)
    if node == m.bye or "bye" in node:
        return text + " " + END_TOKEN
    return text


def _enter(sim: Sim, node: str, rng: Rng) -> None:
    """Bookkeeping when the system says ``node`` (trip step, trivia question counters)."""
    m = sim.m
    kids = m.children.get(node) or ()
    if "correct" in kids:
        if sim.trivia_i == 0:
            q = sim.goal.get("QuestionNum")
            sim.trivia_i = int(q) if q and q.isdigit() else 1
            mm = re.search(r"play (\d+) questions", sim.user_task)
            sim.trivia_n = int(mm.group(1)) if mm else 3
            sim.trivia_known = {int(x) for x in re.findall(r"\((\d+)\)", sim.user_task)}
        else:
            sim.trivia_i += 1
    if "done" in kids and "yes" in kids:
        if sim.trip_route is None:
            mode = (sim.goal.get("TravelMode") or "").replace(" ", "")
            routes = m.routes.get(mode) or next(iter(m.routes.values()), [([], [])])
            sim.trip_route = routes[stable_seed(sim.user_task) % len(routes)]
        sim.trip_i += 1


def _bye(sim: Sim, rng: Rng) -> str:
    m = sim.m
    if m.bye:
        return sim.realise(m.bye, rng)
    return "Thank you and goodbye."


# --------------------------------------------------------------------------------------------
# hallucinations
# --------------------------------------------------------------------------------------------


def _item_alt(sim: Sim, rng: Rng) -> tuple[str, str]:
    s = sim.m.identity
    if s is None:
        return "your request", "a different option"
    v = sim.given.get(s.name) or sim.goal.get(s.name) or ""
    if s.type == "int":
        if not v.isdigit():
            return "your request", "a different option"
        return f"number {v}", f"number {int(v) + 1 + stable_seed(v, sim.m.name) % 9}"
    if not v:
        return "your request", "a different option"
    others = [c for c in s.categories if c != v] or ["a different option"]
    return v, others[stable_seed(v, sim.m.name) % len(others)]


def _line(sim: Sim, template: str, rng: Rng) -> str:
    item, alt = _item_alt(sim, rng)
    return template.format(name=sim.name or "there", item=item, alt=alt, service=sim.m.service, domain=sim.m.domain,
                           other_service=(sim.hal.sub.m.service if sim.hal and sim.hal.sub else sim.m.service))


def _build_hal(sim: Sim, d: Any, rng: Rng, backend: TemplateBackend) -> Hal:
    f = d.fork
    m = sim.m
    hal = Hal(f.htype, f.variant, f)
    ref_trace: list[str] = d.reference.scratch["sim"].trace
    t = f.turn
    end = len(ref_trace)
    for i in range(t - 1, len(ref_trace)):
        if ref_trace[i] in (m.anything_else, m.bye, "bye") or (ref_trace[i] or "").endswith("bye"):
            end = i
            break
    P = [n for n in ref_trace[t - 1:end] if n in m.phr and n not in _GENERIC]
    hal.ask_more = end >= len(ref_trace) or ref_trace[end] == m.anything_else
    at_bye = t - 1 < len(ref_trace) and t - 1 == end and ref_trace[end] != m.anything_else
    C = [n for n in ref_trace[: t - 1] if m.is_ask(n)] or [
        n for n in ref_trace[: t - 1] if n in m.phr and n not in (m.start, m.bye, *_GENERIC)]
    jitter = (0, 0, 1, -1)[rng.below(4)]
    body: list[tuple[str, Any]] = []
    if f.htype == "WIC":
        sub_m = backend.model(d.substitute)
        sub = Sim(sub_m, d.scenario, d.seed, sim.data, goal_seed_salt=1)
        hal.sub = sub
        own = {(n, m.phr.get(n, ("",))[0]) for n in m.phr}
        trace = [n for n in sub_m.happy_trace if n not in (sub_m.start, sub_m.anything_else, sub_m.bye)] \
            or list(sub_m.phr)
        start = next((i for i, n in enumerate(trace) if (n, sub_m.phr[n][0]) not in own), 0)
        n_steps = max(1, len(P) + jitter)
        for i in range(n_steps):
            body.append(("sub", trace[(start + i) % len(trace)]))
        bridges = f.variant.template.get("bridge") or [""]
        hal.lines = tuple(bridges)
    elif f.htype == "SSPC":
        strategy = f.variant.template.get("strategy")
        asks_left = [n for n in P if m.is_ask(n)]
        outcome = m.outcome
        if strategy == "repeat":
            c = C[rng.below(len(C))] if C else (P[1] if len(P) > 1 else (P[0] if P else m.start))
            seq = [c] + P
            if len(P) > 2 and C:
                seq.insert(1 + 2 + rng.below(max(len(P) - 2, 1)), C[rng.below(len(C))])
                seq.pop()
        elif strategy == "skip":
            # skip the step due at t_k (and its later occurrences)
            target = P[0] if P else None
            seq = [n for n in P if n != target] if target else []
            hal.missing = [target] if target and m.is_ask(target) else []
            if not P:
                if at_bye:  # nothing left to skip: repeat a completed step instead
                    seq = [C[-1]] if C else [m.start]
                else:  # only the closing is left: skip "anything else?" and say goodbye at once
                    hal.ask_more = False
        elif strategy == "reverse":
            seq = list(reversed(P))
            if len(P) < 2 or seq[0] == P[0]:  # nothing to reverse: swap the last completed step in
                seq = ([C[-1]] if C else []) + P
        elif strategy == "jump":
            if outcome and P and P[0] != outcome:
                seq = [outcome] + [n for n in P if n != outcome]
                hal.missing = [n for n in asks_left if n != outcome]
            else:  # already at the outcome: jump to the end
                seq = [n for n in P[1:] if n != outcome]
                if not seq:
                    if at_bye:
                        seq = [C[-1]] if C else [m.start]
                    else:
                        hal.ask_more = False
        else:  # chaotic
            pool = list(dict.fromkeys(P + C + list(m.other_asks) + ([outcome] if outcome else [])))
            pool = [n for n in pool if n in m.phr] or [m.start]
            n_steps = max(1, len(P) + jitter)
            seq = []
            for _ in range(n_steps):
                seq.append(pool[rng.below(len(pool))])
            if P and seq[0] == P[0] and len(pool) > 1:
                seq[0] = next(n for n in pool if n != P[0])
        if not seq and (hal.ask_more or at_bye):
            seq = [C[-1]] if C else [m.start]
        body = [("own", n) for n in seq if n]
    else:  # GR, CSC: the workflow's steps with 1-3 standalone turns pursuing the other goal
        kind = "own_alt" if f.htype == "GR" else "own_aux"
        body = [(kind, n) for n in P]
        n_lines = 1 + rng.below(3)
        body.insert(0, ("line", None))
        for _ in range(n_lines - 1):
            body.insert(1 + rng.below(len(body)), ("line", None))
    hal.body = body
    return hal


def _hal_system(sim: Sim, d: Any, rng: Rng, backend: TemplateBackend) -> str:
    hal = sim.hal
    m = sim.m
    if hal.pos >= len(hal.body):
        # closing: anything_else, then goodbye after the user's reply
        hal.closing += 1
        if hal.closing == 1 and m.anything_else and hal.ask_more:
            sim.prev = m.anything_else
            sim.trace.append(m.anything_else)
            return sim.realise(m.anything_else, rng)
        sim.trace.append(m.bye or "bye")
        return _bye(sim, rng) + " " + END_TOKEN
    kind, node = hal.body[hal.pos]
    first = hal.pos == 0
    hal.pos += 1
    if kind == "sub":
        sub = hal.sub
        sub.prev = node
        _enter(sub, node, rng)
        text = sub.realise(node, rng)
        if first and hal.lines:
            bridge = _line(sim, hal.lines[rng.below(len(hal.lines))], rng)
            text = f"{bridge} {text}".strip()
        sim.trace.append(f"{sub.m.name}:{node}")
        return text
    if kind == "line":
        sim.trace.append(f"{hal.htype}:line")
        sim.prev = None
        return _line(sim, hal.lines[rng.below(len(hal.lines))], rng)
    sim.prev = node
    sim.trace.append(node)
    _enter(sim, node, rng)
    return sim.realise(node, rng, alt=(kind == "own_alt"))


def _hal_user(sim: Sim, d: Any, rng: Rng) -> str:
    hal = sim.hal
    m, data = sim.m, sim.data
    kind, node = hal.body[hal.pos - 1]
    if kind == "sub":
        sub = hal.sub
        r = rng.below(20)
        first = hal.pos == 1
        if node in sub.m.ask_slot and r < (8 if first else 12):
            slot = sub.m.ask_slot[node]
            v = sub.goal.get(slot.name, "") if slot is not None else _invent_free(sub.m.ask_readable[node], rng, data)
            return _u(data, "wic_answer", rng, v=v)
        if not first and r < 15:
            return _u(data, "ack", rng)
        return _u(data, "confused", rng, p=m.request)
    if kind == "line":
        if hal.htype == "CSC" and hal.replies:
            return hal.replies[rng.below(len(hal.replies))]
        if hal.htype == "GR":
            item, _ = _item_alt(sim, rng)
            return _u(data, "refuse", rng, i=item)
        return _u(data, "aux_generic", rng)
    # an own-task node (SSPC, GR, CSC)
    prefix = ""
    if node == m.outcome and hal.missing:
        miss = hal.missing.pop(0)
        return _u(data, "missing", rng, r=m.ask_readable.get(miss, "details"))
    if node in m.is_search_more:
        return prefix + _u(data, "more_no", rng)
    kids = m.children.get(node) or ()
    if "yes" in kids or "done" in kids or node in m.confirms:
        return prefix + _u(data, "yes", rng)
    slot = m.ask_slot.get(node)
    if slot is not None and slot.name in sim.given and sim.given[slot.name] != "?":
        v = sim.given[slot.name]
        if slot.type == "long" or slot.free != "generic":
            v = v[:1].lower() + v[1:]
        return prefix + _u(data, "repeat_given", rng, v=v)
    if hal.htype == "SSPC" and hal.variant.template.get("strategy") == "chaotic" and rng.below(3) == 0:
        return _u(data, "chaotic", rng)
    if node in m.ask_slot:
        return prefix + _answer_slot(sim, node, slot, rng)
    if node == m.start:
        return prefix + _u(data, "request", rng, p=m.request)
    if "search_criteria" in node or node.endswith("request_optional"):
        return prefix + _criteria(sim, rng)
    return prefix + _u(data, "ack", rng)


# --------------------------------------------------------------------------------------------
# the backend
# --------------------------------------------------------------------------------------------


class TemplateBackend:
    """Deterministic CPU backend (see the module doc). ``generate`` reads ``TurnRequest.state``
    (the engine's :class:`~generation.engine.Dialogue`); ``messages`` are ignored."""

    name = "template"
    uses_messages = False
    exact = True
    """Forks are exact: system turn t_k always differs from D+'s, replayed prefixes are identical."""
    rewords = True
    """Supports the ``reword`` prefix mode (``Dialogue.reword_rate``)."""
    requires = ("surface_templates",)
    """What the source must give every task (:func:`dialfork_dataset.sources.require`)."""

    def __init__(self, data_path: str | None = None):
        self.data = load_template_data(str(data_path) if data_path else str(DATA_PATH))
        self._models: dict[int, TaskModel] = {}
        self._dbs: dict[int, dict[str, Any]] = {}

    def decoding(self) -> dict[str, Any]:
        return {"temperature": None, "top_p": None, "top_k": None, "max_new_tokens": None}

    def model(self, task: Any) -> TaskModel:
        key = id(task)
        m = self._models.get(key)
        if m is None:
            m = TaskModel(task, self._task_dbs(task), self.data)
            self._models[key] = m
            _happy_walk(m, self.data)
        return m

    def bind_corpus(self, corpus: Any) -> None:
        """Called by the engine before generating: gives access to the knowledge-base schemas."""
        self._corpus_dbs = corpus.dbs

    def _task_dbs(self, task: Any) -> dict[str, Any]:
        dbs = getattr(self, "_corpus_dbs", None)
        if dbs is None:
            raise RuntimeError("TemplateBackend: call bind_corpus(corpus) first (the engine does it)")
        return dbs

    def generate(self, requests: Sequence[TurnRequest]) -> list[str]:
        return [self._one(r) for r in requests]

    def _one(self, req: TurnRequest) -> str:
        d = req.state
        if d is None:
            raise ValueError(f"{req.dialogue_key}: the template backend needs TurnRequest.state (the engine's Dialogue)")
        sim = d.scratch.get("sim")
        if sim is None:
            sim = d.scratch["sim"] = Sim(self.model(d.task), d.scenario, d.seed, self.data)
            if d.turns:  # reuse mode: rebuild the simulator over the copied prefix
                self._fast_forward(sim, d)
        return self._turn(sim, d, req.role, req.turn_index)

    def _turn(self, sim: Sim, d: Any, role: str, turn_index: int) -> str:
        if d.fork is not None and d.injected:
            f = d.fork
            rng = Rng(d.seed, turn_index, 1000 + ("WIC", "SSPC", "GR", "CSC").index(f.htype) * 10 + f.k)
            if role == "system":
                if sim.hal is not None and sim.hal.spec is not f and not d.wrapped:
                    sim.hal = None  # a compound fork's next injection: a new plan from D+'s steps at its turn
                if sim.hal is not None and d.wrapped:
                    sim.trace.append(sim.m.bye or "bye")
                    return _bye(sim, rng) + " " + END_TOKEN
                if sim.hal is None:
                    # system turn t_k: the first hallucinated turn, guaranteed to differ from D+'s
                    sim.hal = hal = _build_hal(sim, d, rng, self)
                    snap = (hal.pos, hal.closing, len(sim.trace), sim.prev)
                    text = _hal_system(sim, d, rng, self)
                    ref = d.reference.turns[len(d.turns)]["text"] if len(d.reference.turns) > len(d.turns) else None
                    tries = 0
                    while ref is not None and _strip_end(text) == ref and tries < 4:
                        tries += 1
                        hal.pos, hal.closing, sim.prev = snap[0], snap[1], snap[3]
                        del sim.trace[snap[2]:]
                        text = _hal_system(sim, d, Rng(d.seed, turn_index, 5000 + tries), self)
                    if ref is not None and _strip_end(text) == ref:
                        text = "Sorry, " + text[:1].lower() + text[1:]
                    return text
                return _hal_system(sim, d, rng, self)
            if sim.hal is not None and sim.hal.closing:
                if sim.hal.closing == 1:
                    return _u(sim.data, "close", rng)
            return user_turn(sim, d, rng)
        if d.fork is not None and d.reword_rate:  # a prefix turn of a fork in ``reword`` mode
            return self._reword_turn(sim, d, role, turn_index, d.reword_rate)
        rng = Rng(d.seed, turn_index)
        if role == "system":
            return system_turn(sim, d, rng, d.seed)
        return user_turn(sim, d, rng)

    def _reword_turn(self, sim: Sim, d: Any, role: str, turn_index: int, rate: float) -> str:
        """A prefix turn (before t_k) realised, with probability ``rate``, with another surface form of
        the dialogue act D+ has there; otherwise D+'s turn exactly. The decision is drawn per
        (dialogue seed, turn, type, k), so the 16 forks of a source are reworded independently, and
        once a prefix turn is reworded every later prefix turn is too (``rate`` is the per-turn
        hazard of the first rewording)."""
        f = d.fork
        salt = 7000 + ("WIC", "SSPC", "GR", "CSC").index(f.htype) * 10 + f.k
        sel = Rng(d.seed, turn_index, salt)
        # the rewording cascades, as in LLM replay (one changed turn changes the context of every
        # later one): a turn is reworded when its own draw or any earlier prefix turn's draw hits.
        # Stateless (recomputed from the seed), so it survives resume; the first reworded turn, and
        # so the Shared-prefix control, has the same distribution as with independent draws.
        hit = sel.random() < rate or any(
            Rng(d.seed, j, salt).random() < rate for j in range(turn_index))
        if not hit:
            rng = Rng(d.seed, turn_index)
            return system_turn(sim, d, rng, d.seed) if role == "system" else user_turn(sim, d, rng)
        rng = RewordRng(d.seed, turn_index, shift=1 + sel.below(1 << 30))
        text = system_turn(sim, d, rng, d.seed) if role == "system" else user_turn(sim, d, rng)
        ref = d.reference.turns[turn_index]["text"] if len(d.reference.turns) > turn_index else None
        if ref is not None and _strip_end(text) == ref:
            # a turn with a single surface form (a bare value, a template with placeholders): add a
            # discourse marker instead
            markers = self.data["reword"][role]
            text = f"{markers[sel.below(len(markers))]} {text}"
        return text

    def _fast_forward(self, sim: Sim, d: Any) -> None:
        class _Replay:
            def __init__(self, dd):
                self.turns, self.wrapped, self.fork, self.injected = [], False, None, False
                self.seed, self.scenario = dd.seed, dd.scenario

        shadow = _Replay(d)
        for i, t in enumerate(d.turns):
            shadow.wrapped = i >= d.budget
            text = self._turn(sim, shadow, t["speaker"], i)
            if _strip_end(text) != t["text"]:
                raise RuntimeError(f"{d.key}: the template simulator does not reproduce the copied prefix at turn {i}")
            shadow.turns.append(t)


def _strip_end(text: str) -> str:
    return text.replace(END_TOKEN, "").strip()


def _happy_walk(m: TaskModel, data: dict[str, Any]) -> None:
    """The task's happy path (nodes the system says when everything succeeds), and its outcome:
    the last content step before ``anything_else``/goodbye."""

    class _Sc:
        happy = True
        user_task = ""
        user_guide = ()

    class _D:
        def __init__(self):
            self.turns: list[dict[str, str]] = []
            self.wrapped = False
            self.fork = None
            self.injected = False

    sim = Sim(m, _Sc(), 0, data)
    d = _D()
    for i in range(60):
        role = "user" if i % 2 == 0 else "system"
        text = system_turn(sim, d, Rng(0, i), 0) if role == "system" else user_turn(sim, d, Rng(0, i))
        d.turns.append({"speaker": role, "text": text})
        if END_TOKEN in text:
            break
    trace = [n for n in sim.trace if n in m.phr]
    m.happy_trace = tuple(trace)
    body = [n for n in trace if n not in (m.start, m.anything_else, m.bye) and "bye" not in n
            and n not in m.is_search_more]
    m.outcome = body[-1] if body else None
