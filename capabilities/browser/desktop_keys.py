"""Names of keys and buttons accepted by `desktop_execute`, and the X keysyms they press.

Keys are the names of nut.js's `Key` enum (a 105-key US keyboard plus media keys), in the
enum's order. Text typed with `keyboard.type {text}` is limited to what a US keyboard types:
printable ASCII, newline (Return) and tab.
"""

from __future__ import annotations

from Xlib import XK

XK.load_keysym_group("xf86")


def _keysym(name: str) -> int:
    keysym = XK.string_to_keysym(name)
    if not keysym:
        raise LookupError(f"no X keysym named {name!r}")
    return keysym


# nut.js Key name -> X keysym name (letters and digits are added below).
_KEY_NAMES: dict[str, str] = {
    "Escape": "Escape",
    **{f"F{n}": f"F{n}" for n in range(1, 25)},
    "Print": "Print",
    "ScrollLock": "Scroll_Lock",
    "Pause": "Pause",
    "Grave": "grave",
    **{f"Num{n}": str(n) for n in (1, 2, 3, 4, 5, 6, 7, 8, 9, 0)},
    "Minus": "minus",
    "Equal": "equal",
    "Backspace": "BackSpace",
    "Insert": "Insert",
    "Home": "Home",
    "PageUp": "Prior",
    "NumLock": "Num_Lock",
    "Divide": "KP_Divide",
    "Multiply": "KP_Multiply",
    "Subtract": "KP_Subtract",
    "Tab": "Tab",
    **{c: c.lower() for c in "QWERTYUIOP"},
    "LeftBracket": "bracketleft",
    "RightBracket": "bracketright",
    "Backslash": "backslash",
    "Delete": "Delete",
    "End": "End",
    "PageDown": "Next",
    "NumPad7": "KP_7",
    "NumPad8": "KP_8",
    "NumPad9": "KP_9",
    "Add": "KP_Add",
    "CapsLock": "Caps_Lock",
    **{c: c.lower() for c in "ASDFGHJKL"},
    "Semicolon": "semicolon",
    "Quote": "apostrophe",
    "Return": "Return",
    "NumPad4": "KP_4",
    "NumPad5": "KP_5",
    "NumPad6": "KP_6",
    "LeftShift": "Shift_L",
    **{c: c.lower() for c in "ZXCVBNM"},
    "Comma": "comma",
    "Period": "period",
    "Slash": "slash",
    "RightShift": "Shift_R",
    "Up": "Up",
    "NumPad1": "KP_1",
    "NumPad2": "KP_2",
    "NumPad3": "KP_3",
    # nut.js sends Enter and Return alike: the main Enter key.
    "Enter": "Return",
    "LeftControl": "Control_L",
    "LeftSuper": "Super_L",
    "LeftWin": "Super_L",
    "LeftCmd": "Super_L",
    "LeftAlt": "Alt_L",
    "Space": "space",
    "RightAlt": "Alt_R",
    "RightSuper": "Super_R",
    "RightWin": "Super_R",
    "RightCmd": "Super_R",
    "Menu": "Menu",
    "RightControl": "Control_R",
    "Fn": "",  # no standard keysym; see below
    "Left": "Left",
    "Down": "Down",
    "Right": "Right",
    "NumPad0": "KP_0",
    "Decimal": "KP_Decimal",
    "Clear": "Clear",
    "AudioMute": "XF86_AudioMute",
    "AudioVolDown": "XF86_AudioLowerVolume",
    "AudioVolUp": "XF86_AudioRaiseVolume",
    "AudioPlay": "XF86_AudioPlay",
    "AudioStop": "XF86_AudioStop",
    "AudioPause": "XF86_AudioPause",
    "AudioPrev": "XF86_AudioPrev",
    "AudioNext": "XF86_AudioNext",
    "AudioRewind": "XF86_AudioRewind",
    "AudioForward": "XF86_AudioForward",
    "AudioRepeat": "XF86_AudioRepeat",
    "AudioRandom": "XF86_AudioRandomPlay",
}

# XF86XK_Fn (evdev KEY_FN), newer than python-xlib's keysym tables.
_XF86_FN = 0x100811D0

#: nut.js key name -> X keysym, in the order of nut.js's Key enum.
KEYS: dict[str, int] = {
    name: (_keysym(xname) if xname else _XF86_FN) for name, xname in _KEY_NAMES.items()
}

#: Mouse button name -> X button number.
BUTTONS: dict[str, int] = {"LEFT": 1, "MIDDLE": 2, "RIGHT": 3}

#: Scroll direction -> X button number (wheel clicks are button presses under X).
SCROLL_BUTTONS: dict[str, int] = {"up": 4, "down": 5, "left": 6, "right": 7}

def text_keysym(char: str) -> int | None:
    """The keysym a US keyboard types `char` with, or None when it has no key for it."""
    if char == "\n":
        return KEYS["Return"]
    if char == "\t":
        return KEYS["Tab"]
    if " " <= char <= "~":
        return ord(char)  # Latin-1 keysyms equal their code points
    return None


def untypeable(text: str) -> tuple[int, str] | None:
    """The position and character of the first character of `text` a US keyboard cannot type."""
    for index, char in enumerate(text):
        if text_keysym(char) is None:
            return index, char
    return None
