"""The slot reader (issue 50, user turns): tiny training, known answers, saving, refusals, provenance."""

from __future__ import annotations

import gzip
import hashlib
import json
import zlib

import numpy as np
import pytest

from dialfork_metrics.task3.workflow.reader import slots as S
from dialfork_metrics.task3.workflow.reader.slots import SlotInfo, SlotReader, SlotReaderError, UserTurn


class HashEncoder:
    """A tiny deterministic encoder: hashed bag of words, L2-normalised."""

    def __init__(self, dim: int = 32, salt: int = 0):
        self.dim, self.salt = dim, salt

    def encode(self, texts):
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            for w in t.lower().split():
                out[i, zlib.crc32(f"{self.salt}:{w}".encode()) % self.dim] += 1.0
            out[i] /= max(np.linalg.norm(out[i]), 1e-9)
        return out


DATE = SlotInfo("appointment_date", "Date of the appointment", "date")
SYMPTOMS = SlotInfo("symptoms", "What the patient suffers from", "text")
CITY = SlotInfo("city", "City of the doctor", "categorical", ("Chicago", "Boston", "New York City"))
SLOTS = [DATE, SYMPTOMS, CITY]


def _turns() -> list[UserTurn]:
    days = ["Monday", "next Friday", "March 3rd", "tomorrow", "the 12th", "Tuesday"]
    ills = ["a sore throat", "a bad headache", "back pain", "a fever and a cough", "a rash", "stomach ache"]
    cities = ["Chicago", "Boston", "New York City"]
    out = []
    for k in range(6):
        out += [
            UserTurn(
                f"{days[k]} please.",
                "What day would you like?",
                ("appointment_date",),
                "clinic",
                {DATE.name: days[k]},
            ),
            UserTurn(
                f"I have {ills[k]}.",
                "What are your symptoms?",
                ("symptoms",),
                "clinic",
                {SYMPTOMS.name: ills[k]},
            ),
            UserTurn(
                f"A doctor in {cities[k % 3]} on {days[k]}.",
                "How can I help?",
                (),
                "clinic",
                {CITY.name: cities[k % 3], DATE.name: days[k]},
            ),
            UserTurn("Yes, thanks.", "Shall I book it?", (), "clinic", {}),
            UserTurn("No, that's all.", "Anything else?", (), "clinic", {}),
        ]
    return out


@pytest.fixture(scope="module")
def tiny() -> SlotReader:
    return SlotReader.fit(_turns(), {"clinic": SLOTS}, encoder=HashEncoder(), seed=0, hidden=8)


def test_tiny_reader_known_answers(tiny):
    got = tiny.read("Next Friday, please.", SLOTS, "What day works for you?", asked=["appointment_date"])
    assert set(got) == {"appointment_date"} and "friday" in got["appointment_date"].lower()
    got = tiny.read("I have a sore throat.", SLOTS, "What are your symptoms?", asked=["symptoms"])
    assert set(got) == {"symptoms"} and "sore throat" in got["symptoms"]
    assert tiny.read("Yes, thanks.", SLOTS, "Shall I book it?", asked=[]) == {}
    got = tiny.read("A doctor in Boston, please.", SLOTS, "How can I help?", asked=[])
    assert got.get("city") == "Boston"
    batch = tiny.read_batch([UserTurn("I have a rash.", "What are your symptoms?", ("symptoms",))], SLOTS)
    assert list(batch[0]) == ["symptoms"]
    p = tiny.scores_batch([UserTurn("Yes, thanks.", "Shall I book it?", ())], SLOTS)[0]
    assert set(p) == {s.name for s in SLOTS} and all(0.0 <= q <= 1.0 for q in p.values())


def test_save_load_round_trip(tiny, tmp_path):
    folder = tiny.save_pretrained(tmp_path / "r")
    assert sorted(f.name for f in folder.iterdir()) == [S.CONFIG_FILE, S.WEIGHTS_FILE]
    back = SlotReader.from_pretrained(folder, encoder=HashEncoder())
    turns = _turns()[:5]
    a, b = tiny.scores_batch(turns, SLOTS), back.scores_batch(turns, SLOTS)
    for x, y in zip(a, b):
        assert x.keys() == y.keys() and all(x[k] == pytest.approx(y[k], abs=1e-5) for k in x)
    assert back.meta["n_turns"] == len(_turns())


def test_corrupt_missing_and_other_encoder_refused(tiny, tmp_path):
    folder = tiny.save_pretrained(tmp_path / "r")
    with pytest.raises(SlotReaderError, match="another encoder|made for encoder") as e:
        SlotReader.from_pretrained(folder, encoder=HashEncoder(salt=1))
    assert "\n" not in str(e.value) and S.REBUILD in str(e.value)
    with pytest.raises(SlotReaderError, match="dim 16"):
        SlotReader.from_pretrained(folder, encoder=HashEncoder(dim=16))
    w = folder / S.WEIGHTS_FILE
    data = bytearray(w.read_bytes())
    data[len(data) // 2] ^= 0xFF
    w.write_bytes(bytes(data))
    with pytest.raises(SlotReaderError, match="corrupt") as e:
        SlotReader.from_pretrained(folder, encoder=HashEncoder())
    assert str(w) in str(e.value) and S.REBUILD in str(e.value) and "\n" not in str(e.value)
    w.unlink()
    with pytest.raises(SlotReaderError, match="missing") as e:
        SlotReader.from_pretrained(folder, encoder=HashEncoder())
    assert str(w) in str(e.value)
    with pytest.raises(SlotReaderError, match="no slot reader weights"):
        SlotReader.from_pretrained(tmp_path / "nowhere", encoder=HashEncoder())
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / S.CONFIG_FILE).write_text("{not json")
    with pytest.raises(SlotReaderError, match="not JSON"):
        SlotReader.from_pretrained(tmp_path / "bad", encoder=HashEncoder())


def test_push_to_hub_is_thin(tiny):
    from unittest import mock

    api = mock.MagicMock()
    assert tiny.push_to_hub("me/slot-reader", api=api) == "me/slot-reader"
    api.upload_folder.assert_called_once()


def test_given_slots_has_volunteered_slots_shape(tiny):
    from dialfork_dataset.workflow.roles import TaskRoles

    roles = TaskRoles("clinic", {}, {}, {"city": CITY.values}, {s.name: s.value_type for s in SLOTS})
    got = S.given_slots(tiny, "A doctor in Chicago on Monday.", roles, "How can I help?", asked=[])
    assert isinstance(got, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in got.items())
    assert got.get("city") == "Chicago"


def _tiny_sgd(folder):
    folder.mkdir()
    schema = [
        {
            "service_name": "Weather_1",
            "slots": [
                {"name": "city", "description": "City", "is_categorical": False, "possible_values": []},
                {"name": "date", "description": "Date", "is_categorical": False, "possible_values": []},
                {
                    "name": "humidity",
                    "description": "Humidity",
                    "is_categorical": False,
                    "possible_values": [],
                },
            ],
            "intents": [
                {"name": "GetWeather", "required_slots": ["city"], "optional_slots": {"date": "today"}}
            ],
        }
    ]
    (folder / "schema.json").write_text(json.dumps(schema))
    fr = lambda acts, sv=None: [  # noqa: E731
        {
            "service": "Weather_1",
            "actions": acts,
            **({"state": {"slot_values": sv}} if sv is not None else {}),
        }
    ]
    d = {
        "dialogue_id": "1_00001",
        "services": ["Weather_1"],
        "turns": [
            {
                "speaker": "USER",
                "utterance": "Weather please.",
                "frames": fr([{"act": "INFORM_INTENT", "slot": "intent"}], {}),
            },
            {
                "speaker": "SYSTEM",
                "utterance": "Which city?",
                "frames": fr([{"act": "REQUEST", "slot": "city"}]),
            },
            {
                "speaker": "USER",
                "utterance": "Paris, on March 3rd.",
                "frames": fr(
                    [
                        {"act": "INFORM", "slot": "city", "values": ["Paris"]},
                        {"act": "INFORM", "slot": "date", "values": ["March 3rd"]},
                    ],
                    {"city": ["Paris"], "date": ["March 3rd"]},
                ),
            },
        ],
    }
    with gzip.open(folder / "dialogues.jsonl.gz", "wt") as f:
        f.write(json.dumps(d) + "\n")


def test_sgd_user_turns_gold_and_provenance(tmp_path):
    _tiny_sgd(tmp_path / "sgd")
    turns = S.sgd_user_turns(tmp_path / "sgd")
    assert [t.given for t in turns] == [{}, {"city": "Paris", "date": "March 3rd"}]
    assert turns[1].asked == ("city",) and turns[1].prev_system == "Which city?" and turns[0].asked == ()
    assert set(turns[1].changed) == {"city", "date"}
    assert all(t.dialogue_id.startswith("sgd:") for t in turns)
    from dialfork_dataset.tracks.sgd import read_sgd

    infos = S.sgd_slot_infos(read_sgd(tmp_path / "sgd").schema)
    assert [s.name for s in infos["Weather_1"]] == ["city", "date"]  # humidity is a result, not given
    assert [s.value_type for s in infos["Weather_1"]] == ["text", "date"]


def test_shipped_weights_never_saw_star_human_dialogues():
    cfg = json.loads((S.WEIGHTS_DIR / S.CONFIG_FILE).read_text())
    training = cfg["training"]
    assert training["sources"] == ["sgd"]
    assert set(training["services"]) <= {
        "Banks_1", "Buses_1", "Calendar_1", "Hotels_1", "Media_1", "Music_1", "Payment_1", "RentalCars_1",
        "Services_2", "Services_3", "Trains_1", "Weather_1",
    }  # fmt: skip
    assert sum(f.stat().st_size for f in S.WEIGHTS_DIR.iterdir()) <= 4 * 2**20
    from dialfork_dataset.tracks.sgd import resolve_sgd

    sgd = resolve_sgd()
    if not (sgd / "dialogues.jsonl.gz").is_file():
        pytest.skip(f"no SGD folder at {sgd}")
    ids = sorted({t.dialogue_id for t in S.sgd_user_turns(sgd)})
    assert hashlib.sha256("\n".join(ids).encode()).hexdigest() == training["dialogue_ids_sha256"]


def test_shipped_reader_known_answers():
    reader = SlotReader.from_pretrained()
    date = SlotInfo("appointment_date", "Date of the appointment", "date")
    symptoms = SlotInfo("symptoms", "The symptoms the patient describes", "text")
    doctor = SlotInfo("doctor_name", "Name of the doctor", "categorical", ("Dr. Morgan", "Dr. Johnson"))
    slots = [date, symptoms, doctor]
    got = reader.read(
        "Next Friday would be best.", slots, "What day would you like to come in?", ["appointment_date"]
    )
    assert "appointment_date" in got and "friday" in got["appointment_date"].lower()
    got = reader.read(
        "I've had a sore throat and a fever since Monday.", slots, "What are your symptoms?", ["symptoms"]
    )
    assert "symptoms" in got and "sore throat" in got["symptoms"]
    got = reader.read("Can I see Dr. Morgan?", slots, "Hello, how can I help?")
    assert got.get("doctor_name") == "Dr. Morgan"


def test_a_checkable_slot_is_given_only_with_its_value():
    """The classifier decides whether a turn gives a slot; for a date, time, weekday, number or a
    categorical slot with categories, the value must also be in the turn (or, for a category, in the
    system turn answered): "Sorry, I got distracted" gives no doctor, whatever the classifier says."""
    chat = UserTurn("Sorry, I got distracted for a second.", "Which city and day?", ("city",))
    assert S._value_for(chat, CITY) is None and S._value_for(chat, DATE) is None
    assert S._value_for(chat, SYMPTOMS) == "Sorry, I got distracted for a second."  # free text: the turn
    open_city = SlotInfo("city", "City", "categorical", ())  # no categories to check against
    assert S._value_for(chat, open_city) == chat.text
    offer = UserTurn("That one works.", "How about Boston?", ("city",))
    assert S._value_for(offer, CITY) == "Boston"
    assert S._value_for(UserTurn("Next Friday.", "When?", ()), DATE) is not None


def test_read_drops_what_the_value_check_refuses(tiny):
    """read() keeps the classifier's slots whose value the check finds and drops the others."""
    import copy

    every = copy.copy(tiny)
    every.threshold = -1.0  # the classifier says yes to every slot
    got = every.read("Sorry, I got distracted for a second.", SLOTS, "Which city and day?", asked=["city"])
    assert set(got) == {"symptoms"}


class CountingEncoder(HashEncoder):
    """:class:`HashEncoder` that records every text it encodes."""

    def __init__(self):
        super().__init__()
        self.seen: list[str] = []

    def encode(self, texts):
        self.seen.extend(texts)
        return super().encode(texts)


def test_a_read_encodes_only_the_user_turn_once_slots_and_system_turn_are_held(tiny, tmp_path):
    enc = CountingEncoder()
    reader = SlotReader.from_pretrained(tiny.save_pretrained(tmp_path / "r"), encoder=enc)
    enc.seen.clear()  # (the load checked the encoder's fingerprint)
    question = "What are your symptoms?"
    first = reader.read("I have a rash.", SLOTS, question, asked=["symptoms"])
    assert set(enc.seen) == {"I have a rash.", question} | {s.text for s in SLOTS}
    enc.seen.clear()
    # the caller encoded the next system turn already (the guard does): the read encodes the user turn alone
    question2 = "What day would you like?"
    reader.remember(question2, HashEncoder().encode([question2])[0])
    second = reader.read("Next Friday, please.", SLOTS, question2, asked=["appointment_date"])
    assert enc.seen == ["Next Friday, please."]
    # the same answers as a reader holding nothing
    fresh = SlotReader.from_pretrained(tmp_path / "r", encoder=HashEncoder())
    assert first == fresh.read("I have a rash.", SLOTS, question, asked=["symptoms"])
    assert second == fresh.read("Next Friday, please.", SLOTS, question2, asked=["appointment_date"])
    with pytest.raises(ValueError, match="dimension 16"):
        reader.remember("x", np.ones(16))


def test_text_memo_is_bounded_least_recently_used():
    memo = S.TextMemo(max_texts=2)
    memo.put("a", np.zeros(3))
    memo.put("b", np.ones(3))
    assert memo.get("a").dtype == np.float32  # reading "a" makes "b" the oldest
    memo.put("c", np.ones(3))
    assert list(memo) == ["a", "c"] and "b" not in memo and memo.get("b") is None and len(memo) == 2


def test_text_memo_shared_between_threads_keeps_its_bound():
    """Readers of many guard sessions may share one memo: lookups and insertions from several
    threads never fail, and the memo never holds more than its bound."""
    from concurrent.futures import ThreadPoolExecutor

    memo = S.TextMemo(max_texts=8)

    def work(k: int) -> int:
        hits = 0
        for i in range(400):
            memo.put(f"t{(k * 7 + i) % 20}", np.full(3, i, dtype=np.float32))
            hits += memo.get(f"t{(k + i) % 20}") is not None
        return hits

    with ThreadPoolExecutor(4) as pool:
        assert all(h >= 0 for h in pool.map(work, range(8)))
    assert len(memo) <= 8 and all(memo.get(t) is not None for t in list(memo))
