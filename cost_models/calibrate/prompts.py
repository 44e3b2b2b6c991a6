"""Prompts for the real speculative-decoding measurement, written for this repo.

Two kinds, because acceptance depends on the workload: *code* (edit or extend code shown in
the prompt, so much of the answer repeats the prompt and prompt lookup can shine) and *chat*
(open questions answered in fresh prose). Each is a single user turn in the model's ChatML
template.
"""

from __future__ import annotations

CODE: dict[str, str] = {
    "rename-variables": '''Rename the variable `lst` to `values` and `res` to `result` in this function, and return the full function:

```python
def moving_average(lst, window):
    res = []
    total = 0.0
    for i, x in enumerate(lst):
        total += x
        if i >= window:
            total -= lst[i - window]
        if i >= window - 1:
            res.append(total / window)
    return res
```''',
    "add-docstring": '''Add a docstring to this Python class and return the complete class:

```python
class Stack:
    def __init__(self):
        self.items = []

    def push(self, item):
        self.items.append(item)

    def pop(self):
        if not self.items:
            raise IndexError("pop from empty stack")
        return self.items.pop()

    def peek(self):
        return self.items[-1]

    def __len__(self):
        return len(self.items)
```''',
    "type-hints": '''Add type hints to every function below and return the code:

```python
def parse_line(line):
    name, age, city = line.strip().split(",")
    return {"name": name, "age": int(age), "city": city}


def read_people(path):
    with open(path) as fh:
        return [parse_line(line) for line in fh if line.strip()]


def oldest(people):
    return max(people, key=lambda p: p["age"])
```''',
    "write-function": "Write a Python function `count_words(text)` that returns a dictionary "
                      "mapping each lowercase word in the text to the number of times it "
                      "appears. Include a short example of calling it.",
}

CHAT: dict[str, str] = {
    "explain-rain": "Why does it rain? Explain it simply for a ten-year-old.",
    "travel-tips": "I am visiting Paris for three days. What should I see and eat?",
    "healthy-habits": "Give me five tips to sleep better at night.",
    "email": "Write a short, polite email to my manager asking for Friday afternoon off to "
             "attend my sister's graduation.",
}

PROMPTS: dict[str, dict[str, str]] = {"code": CODE, "chat": CHAT}

# ``specsim calibrate --quick``: one short prompt of each kind. The code prompt is a small
# edit whose answer repeats the prompt (so prompt lookup still has something to copy) at
# about half the tokens of the full set's code prompts: shorter prefills and contexts.
QUICK: dict[str, dict[str, str]] = {
    "code": {"rename-short": '''Rename the variable `n` to `count` in this function and return it:

```python
def count_even(xs):
    n = 0
    for x in xs:
        if x % 2 == 0:
            n += 1
    return n
```'''},
    "chat": {"explain-rain": CHAT["explain-rain"]},
}
