"""The template backend's data and shared constants: the phrasing pools file, node and slot name
conventions, and the random stream of the ``reword`` prefix mode."""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from typing import Any

from ...seeds import Rng

#: The phrasing pools (``generation/template_data.yaml``).
DATA_PATH = Path(__file__).resolve().parents[2] / "template_data.yaml"

PLACEHOLDER = re.compile(r"\{(\w+)(?::[^}]*)?\}")
CAMEL_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")
SECRET_SLOTS = {"PIN", "AccountNumber", "SecurityAnswer1", "SecurityAnswer2", "DateOfBirth", "Code"}
PERSON_SLOTS = ("FullName", "RenterName", "PatientName", "CustomerName", "UserName", "GuestName", "HostName")
POSITIVE_BRANCHES = ("available", "query_success")
NEGATIVE_BRANCHES = ("unavailable", "query_failure")
GENERIC_NODES = ("anything_else", "out_of_scope")

#: ask-node suffix (after the domain prefix and ``ask_``) -> API input slot. Unlisted suffixes
#: fall back to token overlap with the slot names.
ASK_ALIASES: dict[str, tuple[str, ...]] = {
    "name": ("PERSON",),
    "apartment_name": ("Name",),
    "day": ("Day",),
    "start_time": ("StartTimeHour",),
    "end_time": ("EndTimeHour",),
    "application_fee_paid": ("ApplicationFeePaid",),
    "custom_message": ("Message",),
    "account_number": ("AccountNumber",),
    "pin": ("PIN",),
    "dob": ("DateOfBirth",),
    "mothers_maiden_name": ("SecurityAnswer1",),
    "childhood_pets_name": ("SecurityAnswer2",),
    "fraud_details": ("FraudReport",),
    "doctor_name": ("Name",),
    "symptoms": ("Symptoms",),
    "hotel": ("Name",),
    "date_from": ("StartDate",),
    "date_to": ("EndDate",),
    "customer_request": ("CustomerRequest",),
    "room_number": ("RoomNumber",),
    "service_request": ("CustomerRequest",),
    "time": ("Time", "StartTimeHour", "ArrivalTime", "DepartureTime"),
    "guest_name": ("Name",),
    "reason": ("MeetingReason",),
    "venue": ("Name",),
    "number_of_guests": ("NumberGuests",),
    "starting_time": ("StartTimeHour",),
    "host": ("HostName",),
    "arrival_time": ("ArrivalTime",),
    "parking_needed": ("NeedParking",),
    "dietary_restrictions": ("DietaryRestrictions",),
    "flight_id": ("id",),
    "departure_city": ("DepartureCity",),
    "arrival_city": ("ArrivalCity",),
    "date": ("Date",),
    "restaurant": ("Name",),
    "size": ("PartySize",),
    "destination": ("ArrivalLocation",),
    "departure": ("DepartureLocation",),
    "booking_number": ("id",),
    "change": ("ChangeDescription",),
    "rank": ("UserRank",),
    "code": ("Code",),
    "code_type": ("CodeType",),
    "lock_manufacturer": ("LockManufacturer",),
    "colour_top_cable": ("ColorOfTopCable",),
    "colour_second_cable": ("ColorOfSecondCable",),
    "travel_mode": ("TravelMode",),
    "departure_location": ("DepartureLocation",),
    "arrival_location": ("ArrivalLocation",),
    "departure_time": ("DepartureTime",),
    "question_number": ("QuestionNum",),
    "location": ("City", "Location"),
    "food": ("FoodRequest",),
    "drinks": ("DrinksRequest",),
    "num_bedrooms": ("NumRooms",),
    "price": ("Price",),
    "floor": ("Level",),
    "balcony": ("HasBalcony",),
    "elevator": ("HasElevator",),
    "nearby_pois": ("NearbyPOIs",),
    "food_type": ("Food",),
    "rating": ("AverageRating",),
    "delivery": ("DoesDelivery",),
    "takes_reservations": ("TakesReservations",),
}
#: placeholder -> knowledge-base field, where the names differ.
PH_ALIASES: dict[str, str] = {
    "size": "FloorSquareMeters",
    "num_bedrooms": "NumRooms",
    "floor": "Level",
    "pois": "NearbyPOIs",
    "temperature": "TemperatureCelsius",
    "balance": "BankBalance",
    "clazz": "Class",
    "duration": "DurationHours",
    "price_range": "Cost",
    "average_rating": "AverageRating",
    "rating": "AverageRating",
    "food_type": "Food",
    "hotel_location": "Location",
    "booking_id": "id",
    "end_time": "EndTimeHour",
    "start_time": "StartTimeHour",
    "flight_id": "id",
}
BAD_OUTCOME = re.compile(r"unavailable|failed|cannot|nothing|not_available|no_venue")
DYNAMIC_PLACEHOLDERS = frozenset({"question", "answer", "simple_instruction", "detailed_instruction"})
FREE_TEXT_KEYS = (
    ("message", "message"),
    ("symptom", "symptoms"),
    ("request", "request"),
    ("fraud", "fraud"),
    ("reason", "reason"),
    ("food", "food"),
    ("drink", "drinks"),
    ("dietary", "dietary"),
    ("change", "change"),
)


@lru_cache(maxsize=4)
def load_template_data(path: str = str(DATA_PATH)) -> dict[str, Any]:
    """The phrasing pools at ``path`` (cached).

    Args:
        path: a YAML template-data file (default: the packaged :data:`DATA_PATH`).

    Returns:
        The parsed mapping (``version``, ``user`` pools, ``free_text``, ``reword`` markers, ...).

    Raises:
        ValueError: the file is not a mapping with ``version`` and ``user``.
    """
    import yaml

    with open(path, encoding="utf-8") as fh:
        data = yaml.safe_load(fh)
    if not isinstance(data, dict) or "user" not in data or "version" not in data:
        raise ValueError(f"{path}: not a template-backend data file (needs 'version' and 'user')")
    return data


def norm_name(s: str) -> str:
    """Lower-case letters and digits only (``"Start_Time"`` -> ``"starttime"``): how names are matched.

    Args:
        s: a node, slot or field name.

    Returns:
        ``s`` lower-cased with every character other than ``a-z`` and ``0-9`` removed.
    """
    return re.sub(r"[^a-z0-9]", "", s.lower())


class RewordRng(Rng):
    """The turn's random stream with a surface shift (``reword`` prefix mode): every phrasing choice
    (a node's phrasing, a user pool's template) moves to another entry of the same pool, while every
    draw stays the same, so the simulator takes the same decisions (same dialogue acts, same
    workflow path) and only the surface form changes.

    Args:
        seed: the stream's seed (the dialogue seed), as for :class:`~generation.seeds.Rng`.
        *salt: integers mixed into the seed (the turn index), as for :class:`~generation.seeds.Rng`.
        shift: how far each phrasing pick moves: ``1 + shift % (n - 1)`` entries forward in a pool
            of ``n`` (default 1), so never back onto the plain stream's pick.
    """

    __slots__ = ("shift",)

    def __init__(self, seed: int, *salt: int, shift: int = 1):
        super().__init__(seed, *salt)
        self.shift = shift


def pick_phrasing(rng: Rng, n: int) -> int:
    """Index of a phrasing among ``n``: one draw; shifted to another index under :class:`RewordRng`.

    Args:
        rng: the turn's stream (an exact :class:`RewordRng` shifts the pick; a subclass does not).
        n: the pool size, >= 1.

    Returns:
        An index in ``[0, n)``; under :class:`RewordRng` with ``n > 1``, always different from the
            plain stream's pick.

    Raises:
        ValueError: ``n`` is not positive (from :meth:`Rng.below`).
    """
    i = rng.below(n)
    if rng.__class__ is RewordRng and n > 1:
        i = (i + 1 + rng.shift % (n - 1)) % n
    return i


__all__ = [
    "ASK_ALIASES",
    "BAD_OUTCOME",
    "CAMEL_WORD",
    "DATA_PATH",
    "DYNAMIC_PLACEHOLDERS",
    "FREE_TEXT_KEYS",
    "GENERIC_NODES",
    "NEGATIVE_BRANCHES",
    "PERSON_SLOTS",
    "PH_ALIASES",
    "PLACEHOLDER",
    "POSITIVE_BRANCHES",
    "SECRET_SLOTS",
    "RewordRng",
    "load_template_data",
    "norm_name",
    "pick_phrasing",
]
