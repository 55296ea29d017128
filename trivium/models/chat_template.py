"""trivium's chat template for the real-shape models: ChatML turns with tools and thinking.

Owns the Jinja text ``trivium init model`` attaches to the real-shape presets' tokenizers
(``real_shapes.py``) and the tags it writes. The format is the one Qwen-family models
read: ``<|im_start|>role\\n...<|im_end|>`` turns; tool signatures as JSON lines inside
``<tools></tools>`` in the system turn; calls as ``<tool_call>{"name": ..., "arguments":
...}</tool_call>`` blocks (what the ``hermes`` tool-call parser reads); tool results as
``<tool_response>`` blocks in a user turn (consecutive tool messages share one turn);
reasoning in a ``<think>...</think>`` block.

Thinking (``enable_thinking``, passed by the model wrapper and the server):

* unset or true: the generation prompt is ``<|im_start|>assistant\\n`` and the model opens
  its own ``<think>`` block;
* false: the generation prompt ends with an empty ``<think>\\n\\n</think>\\n\\n`` block, and
  every earlier assistant turn starts with the same block, as the model saw it.

An assistant message's ``reasoning_content`` renders as its ``<think>`` block, and its
``tool_calls`` (OpenAI shape; ``arguments`` a JSON string or an object) as ``<tool_call>``
blocks after its content. Earlier turns are never rewritten (no reasoning is dropped), so
the template is prefix-preserving and multi-turn episodes continue token-exactly
(``conversation.py``). The ``{% generation %}`` markers wrap what the model writes (the
reasoning, the content, the calls and ``<|im_end|>``), for SFT's assistant-token mask.

Knows nothing about tokenizers or models.
"""

from __future__ import annotations

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
TOOL_CALL_OPEN, TOOL_CALL_CLOSE = "<tool_call>", "</tool_call>"
TOOL_RESPONSE_OPEN, TOOL_RESPONSE_CLOSE = "<tool_response>", "</tool_response>"
TOOLS_OPEN, TOOLS_CLOSE = "<tools>", "</tools>"

# The fixed text of the system turn's tools section, around the JSON lines of the tools.
TOOLS_INTRO = (
    "# Tools\n\n"
    "You can call the functions below. Each one is described by a JSON signature, one per line, "
    f"inside {TOOLS_OPEN}{TOOLS_CLOSE}:\n{TOOLS_OPEN}"
)
TOOLS_OUTRO = (
    f"\n{TOOLS_CLOSE}\n\n"
    f"To call a function, answer with a {TOOL_CALL_OPEN}{TOOL_CALL_CLOSE} block holding a JSON object "
    "with its name and its arguments, one block per call:\n"
    f'{TOOL_CALL_OPEN}\n{{"name": <function name>, "arguments": <the arguments as a JSON object>}}\n{TOOL_CALL_CLOSE}'
)
EMPTY_THINK_BLOCK = f"{THINK_OPEN}\n\n{THINK_CLOSE}\n\n"


def _jinja_string(text: str) -> str:
    """``text`` as a single-quoted Jinja string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n") + "'"


CHATML_TOOLS_TEMPLATE = (
    # A message's content as text: a string, or the text parts of an OpenAI content list.
    "{%- macro text_of(content) -%}"
    "{%- if content is string -%}{{- content -}}"
    "{%- elif content is mapping -%}{{- content | tojson -}}"
    "{%- elif content is iterable -%}"
    "{%- for part in content -%}{%- if part is mapping and part.text is defined -%}{{- part.text -}}{%- endif -%}{%- endfor -%}"
    "{%- elif content is not none -%}{{- content -}}"
    "{%- endif -%}"
    "{%- endmacro -%}"
    "{%- set thinking_off = enable_thinking is defined and enable_thinking is not none and not enable_thinking -%}"
    "{%- set has_system = messages | length > 0 and messages[0]['role'] == 'system' -%}"
    # The system turn: the system message, then the tools section.
    "{%- if tools -%}"
    "{{- '<|im_start|>system\\n' -}}"
    "{%- if has_system -%}{{- text_of(messages[0]['content']) + '\\n\\n' -}}{%- endif -%}"
    "{{- " + _jinja_string(TOOLS_INTRO) + " -}}"
    "{%- for tool in tools -%}{{- '\\n' + (tool | tojson) -}}{%- endfor -%}"
    "{{- " + _jinja_string(TOOLS_OUTRO) + " + '<|im_end|>\\n' -}}"
    "{%- elif has_system -%}"
    "{{- '<|im_start|>system\\n' + text_of(messages[0]['content']) + '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- for message in messages -%}"
    "{%- set role = message['role'] -%}"
    "{%- if loop.first and has_system -%}"
    "{%- elif role == 'assistant' -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- set reasoning = message['reasoning_content'] if message['reasoning_content'] is defined else none -%}"
    "{%- if not reasoning and thinking_off -%}{{- " + _jinja_string(EMPTY_THINK_BLOCK) + " -}}{%- endif -%}"
    "{%- generation -%}"
    "{%- if reasoning -%}{{- '<think>\\n' + (reasoning | trim) + '\\n</think>\\n\\n' -}}{%- endif -%}"
    "{%- set content = text_of(message['content']) -%}"
    "{{- content -}}"
    "{%- if message['tool_calls'] is defined and message['tool_calls'] -%}"
    "{%- for call in message['tool_calls'] -%}"
    "{%- set function = call['function'] if call['function'] is defined else call -%}"
    "{%- if content or not loop.first -%}{{- '\\n' -}}{%- endif -%}"
    "{{- '<tool_call>\\n{\"name\": ' + (function['name'] | tojson) + ', \"arguments\": ' -}}"
    "{%- if function['arguments'] is string -%}{{- function['arguments'] -}}"
    "{%- else -%}{{- (function['arguments'] if function['arguments'] is defined else {}) | tojson -}}{%- endif -%}"
    "{{- '}\\n</tool_call>' -}}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{{- '<|im_end|>' -}}"
    "{%- endgeneration -%}"
    "{{- '\\n' -}}"
    "{%- elif role == 'tool' -%}"
    "{%- if loop.first or messages[loop.index0 - 1]['role'] != 'tool' -%}{{- '<|im_start|>user' -}}{%- endif -%}"
    "{{- '\\n<tool_response>\\n' + text_of(message['content']) + '\\n</tool_response>' -}}"
    "{%- if loop.last or messages[loop.index0 + 1]['role'] != 'tool' -%}{{- '<|im_end|>\\n' -}}{%- endif -%}"
    "{%- else -%}"
    "{{- '<|im_start|>' + role + '\\n' + text_of(message['content']) + '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- if thinking_off -%}{{- " + _jinja_string(EMPTY_THINK_BLOCK) + " -}}{%- endif -%}"
    "{%- endif -%}"
)
