"""The simulator's words: error templates and patterns, domains, tools, normal texts."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

# --------------------------------------------------------------------------------------------
# Ground-truth vocabulary.

VISIBLE_KINDS = ("tool_error", "invalid_action", "parse_error")
"""Kinds of visible errors, in the order of :attr:`PolicyParams.kind_weights`."""

EVENTS = ("progress", "stall", "error", "repeat", "recover", "fatal")
"""Values of a turn's ``meta.event``: the first three outside a spell, the last three inside."""

# --------------------------------------------------------------------------------------------
# Visible-error observations, one constant per kind. The rules engine (recovery/marking)
# recognises these; VISIBLE_ERROR_PATTERNS are regular expressions that match every template
# of their kind and nothing a normal observation says. Placeholders: {noun} the entity,
# {wrong} a wrong id, {tool} the tool called, {arg} an argument name, {line}/{code}/{req}/{col}
# numbers, {bad_tool} a tool that does not exist, {reason} a policy reason, {head} the start of
# the unparseable action.

TOOL_ERROR_TEMPLATES = (
    "Error: {noun} {wrong} not found",
    "Error: no {noun} with id {wrong} for this user",
    'Traceback (most recent call last):\n  File "tools/{tool}.py", line {line}, in {tool}\n'
    "    record = db[{arg}]\nKeyError: '{wrong}'",
    "Exception: {tool} did not complete: upstream service returned HTTP {code} (request {req})",
)
"""``tool_error``: the tool reported an error or raised. The first three answer an action that
uses a wrong id; the last answers a correct action (a transient failure: retrying recovers)."""

INVALID_ACTION_TEMPLATES = (
    "Invalid action: {tool} requires argument '{arg}'",
    "Invalid action: unknown tool '{bad_tool}'",
    "Action rejected: {reason}",
)
"""``invalid_action``: the environment rejected the action (missing argument, unknown tool,
not allowed by policy)."""

PARSE_ERROR_TEMPLATES = (
    "Could not parse action: unbalanced parentheses at column {col}",
    "Could not parse action: expected name(arg=value, ...), got '{head}'",
    "Could not parse action: arguments are not valid JSON (line 1, column {col})",
)
"""``parse_error``: the action text is not a well-formed tool call."""

VISIBLE_ERROR_TEMPLATES: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "tool_error": TOOL_ERROR_TEMPLATES,
        "invalid_action": INVALID_ACTION_TEMPLATES,
        "parse_error": PARSE_ERROR_TEMPLATES,
    }
)
"""Every visible-error template, by kind."""

VISIBLE_ERROR_PATTERNS: Mapping[str, str] = MappingProxyType(
    {
        "tool_error": r"^(Error: |Traceback \(most recent call last\):|Exception: )",
        "invalid_action": r"^(Invalid action: |Action rejected: )",
        "parse_error": r"^Could not parse action: ",
    }
)
"""Regular expressions (Python and DuckDB/RE2 syntax) that recognise each kind's observations."""

NORMAL_TEXT_FORBIDDEN = (
    r"(?i)error|exception|traceback|invalid|reject|could not|cannot|parse|not found|fail|denied"
)
"""Wording no normal (clean or silent-error) observation ever contains; tests check it."""

INVALID_REASONS = (
    "the user has not confirmed this change",
    "basic economy fares cannot be modified",
    "the order is already being processed",
    "the account is locked pending identity verification",
    "this operation is not allowed after check-in",
    "a transfer is only allowed after the user asks for a human agent",
)

# --------------------------------------------------------------------------------------------
# Domains: tools, id formats, and the texts of normal turns.


@dataclass(frozen=True, slots=True)
class Tool:
    name: str
    kind: str  # "lookup" or "mutate"
    verb: str
    amount: bool = False
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()


@dataclass(frozen=True, slots=True)
class Domain:
    noun: str
    id_arg: str
    id_style: str  # "alnum6", "order", "ticket"
    tools: tuple[Tool, ...]
    bad_tools: tuple[str, ...]
    topics: tuple[str, ...]


DOMAIN_SPECS: Mapping[str, Domain] = MappingProxyType(
    {
        "airline": Domain(
            noun="reservation",
            id_arg="reservation_id",
            id_style="alnum6",
            tools=(
                Tool("get_reservation_details", "lookup", "lookup"),
                Tool("update_reservation_flights", "mutate", "flight change", True,
                      (("cabin", ("economy", "business", "basic_economy")),)),
                Tool("update_reservation_baggages", "mutate", "baggage update", True,
                      (("total_baggages", ("1", "2", "3")),)),
                Tool("update_reservation_passengers", "mutate", "passenger update", False,
                      (("passengers", ("1", "2", "4")),)),
                Tool("cancel_reservation", "mutate", "cancellation", False,
                      (("reason", ("change of plan", "airline cancelled flight")),)),
                Tool("pay_balance", "mutate", "payment", True),
                Tool("get_flight_status", "lookup", "status check"),
            ),
            bad_tools=("update_booking", "change_flight", "modify_reservation_seat"),
            topics=("baggage allowance", "cancellation", "cabin changes", "compensation"),
        ),
        "retail": Domain(
            noun="order",
            id_arg="order_id",
            id_style="order",
            tools=(
                Tool("get_order_details", "lookup", "lookup"),
                Tool("exchange_delivered_order_items", "mutate", "exchange", True,
                      (("new_item", ("blue, size M", "black, size L", "white, 64GB")),)),
                Tool("return_delivered_order_items", "mutate", "return", True),
                Tool("cancel_pending_order", "mutate", "cancellation", False,
                      (("reason", ("no longer needed", "ordered by mistake")),)),
                Tool("modify_pending_order_address", "mutate", "address change", False,
                      (("city", ("Denver", "Austin", "Seattle")),)),
                Tool("refund_payment", "mutate", "refund", True),
                Tool("get_shipping_status", "lookup", "tracking check"),
            ),
            bad_tools=("update_order", "return_items", "change_address_now"),
            topics=("returns", "exchanges", "refund timing", "shipping"),
        ),
        "telecom": Domain(
            noun="account",
            id_arg="account_id",
            id_style="ticket",
            tools=(
                Tool("get_account_details", "lookup", "lookup"),
                Tool("change_plan", "mutate", "plan change", True,
                      (("plan", ("basic", "unlimited", "family")),)),
                Tool("apply_credit", "mutate", "credit", True),
                Tool("suspend_line", "mutate", "suspension", False,
                      (("reason", ("travel", "lost device")),)),
                Tool("schedule_callback", "mutate", "callback", False,
                      (("slot", ("morning", "afternoon", "evening")),)),
                Tool("settle_bill", "mutate", "bill payment", True),
                Tool("get_usage_summary", "lookup", "usage check"),
            ),
            bad_tools=("update_plan", "add_credit", "close_account_now"),
            topics=("roaming", "plan changes", "billing cycle", "device insurance"),
        ),
    }
)
DOMAINS = tuple(DOMAIN_SPECS)
"""Names of the built-in task domains."""

# Normal observations. Progress turns (and silent errors, which must look the same) reveal the
# id and the amount the next step needs: {next} and {amount}.
LOOKUP_OK = (
    "{Noun} on file: status {status}, items: {count}. Linked {noun}: {next}. Amount due: ${amount}.",
    '{{"status": "{status}", "linked_id": "{next}", "amount_due": {amount}, "updated": "{date}"}}',
    "Found it. Status: {status}. Next reference {next}; balance ${amount} as of {date}.",
    "Record retrieved ({count} entries). Related {noun} {next} shows ${amount} outstanding.",
)
MUTATE_OK = (
    "Done: {verb} applied. Confirmation {next}. Remaining balance: ${amount}.",
    '{{"ok": true, "confirmation": "{next}", "balance": {amount}, "at": "{time}"}}',
    "{Verb} completed at {time}. Follow-up {noun} {next} opened; ${amount} left to settle.",
    "Success. The {noun} now reads status {status}. Reference {next}, balance ${amount}.",
)
# A lookup of a known entity (a stall, or a recovery that makes no progress).
STATUS_OBS = (
    "{Noun} {id}: status {status}, no pending changes.",
    '{{"id": "{id}", "status": "{status}", "pending_changes": 0}}',
    "{Noun} {id} is {status}; last updated {date}.",
)
RECHECK_OBS = (
    "{Noun} {id}: status {status}. Amount due: ${amount}.",
    '{{"id": "{id}", "status": "{status}", "amount_due": {amount}}}',
    "Current state of {id}: {status}, ${amount} still open.",
)
# The first observation after a silent spell says what went wrong (a clean recovery turn).
RECONCILE_ID = (
    "Note: no changes were recorded for {wrong}; it is not on this account. ",
    "Checked again: the earlier request went to {wrong}, not {right}. ",
    "{wrong} does not belong to this user; applying to {right} instead. ",
)
RECONCILE_AMOUNT = (
    "Note: the amount on file is ${right}, not ${wrong}. ",
    "Adjusted: ${wrong} did not match the quoted ${right}; using ${right}. ",
    "Checked again: the balance was ${right}, so nothing was charged for ${wrong}. ",
)
STATUSES = ("confirmed", "pending", "active", "on hold", "scheduled", "open")
THOUGHTS = (
    "The user wants this sorted today; let me check the details first.",
    "Before changing anything I should confirm which {noun} the user means.",
    "Let me review the policy on {topic} before acting.",
    "I have the {noun} details; next I need the user's confirmation.",
    "Looking at {id} again to be sure of its status.",
    "Plan: verify, then make the change, then summarise for the user.",
)
THINK_OBS = ("Thought recorded.", "OK.", "(no output)")
MESSAGES = (
    "Could you confirm that you want me to go ahead with this?",
    "Just to be sure: is {id} the {noun} you mean?",
    "Thanks for waiting, I am checking this now.",
    "Would you like a summary of the changes before I continue?",
    "Can you tell me the reason for the change?",
)
USER_REPLIES = (
    "Yes, please go ahead.",
    "That's the one, thanks.",
    "Sure, take your time.",
    "Please just do it, I'm in a hurry.",
    "It's because my plans changed.",
    "Yes. And please keep me posted.",
)
POLICY_TEXTS = (
    "Policy on {topic}: changes are allowed up to 24 hours before the scheduled date.",
    "Policy on {topic}: the user must confirm every change explicitly.",
    "Policy on {topic}: refunds go back to the original payment method within 7 days.",
    "Policy on {topic}: agents may act only on records that belong to the user.",
)
PROMPTS = (
    "User: Hi, I need help with my {noun} {id}. I was told the amount is ${amount}.",
    "User: Hello. My {noun} is {id} and there is ${amount} to sort out. Can you help?",
    "User: I want to make some changes to {noun} {id} (quoted ${amount}).",
    "User: Please look at {id}, my {noun}. The last statement said ${amount}.",
)

