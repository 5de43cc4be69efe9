"""Static shell completion scripts for `tfm` (bash, zsh, fish), generated from the Typer app.

    python -m tfm_cli.cli.completions [--check] [DIR]

walks `typer.main.get_command(app)` (the click group, its commands and command groups such as `tfm bench`,
their options and arguments) and writes `tfm.bash`, `tfm.zsh` and `tfm.fish` into DIR (default: the
repository's `completions/`). `--check` writes nothing and exits 1 naming the files that differ from what
would be generated (tests run it, so a command or option changed without regenerating fails the test suite).

The scripts are plain shell: completing never starts Python, so it is instant. They complete commands (and a
group's subcommands, one level deep: `tfm bench attention`), long and short option names, fixed choices, file
paths for path-like options and arguments, and recipe override keys (`train.max_steps=`) for `tfm train` /
`tfm tokenize` / `tfm bench train`. The output is deterministic (sorted wherever order carries no meaning), so
regenerating an unchanged app changes no byte.
"""

from __future__ import annotations

import argparse
import enum
import sys
import typing
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tfm_cli.scoring import BLEU_TOKENIZERS

PROG = "tfm"
GENERATOR = "python -m tfm_cli.cli.completions"
FILES = ("tfm.bash", "tfm.zsh", "tfm.fish")

# Values of plain `str` options that the app checks itself rather than declaring them as a Choice
# (`tfm_cli.runtime.DEVICES`, `tfm_cli.precisions.TRANSLATE_PRECISIONS`, `tfm_cli.bench.common.DTYPES`, `tfm_cli.bench.attention.MASKS` and
# `implementations()`, `tfm_cli.attention.KINDS`; importing them here would load torch just to generate text).
_OPTION_CHOICES: dict[str, tuple[str, ...]] = {
    "--device": ("auto", "cpu", "cuda"),
    "--precision": ("auto", "fp32", "bf16", "fp16", "int8"),  # translate and bench translate: + int8 (CPU)
    "--dtype": ("fp32", "bf16", "fp16"),
    "--format": ("release", "onnx", "huggingface"),  # tfm export (tfm_cli.cli.export.FORMATS)
    "--bleu-tokenize": BLEU_TOKENIZERS,  # tfm translate (tfm_cli.scoring imports neither torch nor sacrebleu)
    "--mask": ("none", "padding", "causal"),
    "--impl": ("naive", "tfm", "sdpa-math", "sdpa-flash", "sdpa-efficient", "sdpa-cudnn"),
    "--kind": ("encoder", "decoder", "cross"),  # tfm inspect-attn (tfm_cli.attention.KINDS)
    "--engine": ("auto", "torch", "onnxruntime"),  # tfm translate (tfm_cli.translator.ENGINES)
}
# Where one command takes fewer of them (inspect-attn: `tfm_cli.precisions.PRECISIONS`, its weights are the fp32 model's).
_COMMAND_CHOICES: dict[tuple[str, str], tuple[str, ...]] = {("inspect-attn", "--precision"): ("auto", "fp32", "bf16", "fp16")}
# Arguments typed `str` in the app because they also take other things (with `tfm train --resume RUN`, the
# first word is an override): what to complete for them.
_ARGUMENT_KINDS: dict[str, str] = {"recipe": "file", "overrides": "override"}
# Options typed `str` for the same reason (`--corpus` also takes bundled:NAME): what to complete for them.
_OPTION_KINDS: dict[str, str] = {"--corpus": "file"}


# ------------------------------------------------------------------------------------------------------------
# The app, described
# ------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Option:
    names: tuple[str, ...]  # long and short names, sorted ("--model", "-m")
    help: str  # first sentence of the help
    kind: str  # flag | value | file | dir | choice
    choices: tuple[str, ...] = ()
    multiple: bool = False  # may be given more than once

    @property
    def takes_value(self) -> bool:
        return self.kind != "flag"


@dataclass(frozen=True)
class Argument:
    name: str
    help: str
    kind: str  # text | file | dir | choice | override
    variadic: bool  # takes every remaining word
    choices: tuple[str, ...] = ()
    required: bool = False


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    options: tuple[Option, ...]
    arguments: tuple[Argument, ...]
    commands: tuple[Command, ...] = ()  # a group's subcommands (`tfm bench attention`); none for a command

    @property
    def takes_overrides(self) -> bool:
        return any(a.kind == "override" for a in self.arguments)

    def may_be_override(self, argument: Argument) -> bool:
        """Whether the word for a file argument may already be an override: with `tfm train --resume RUN
        key=value` the recipe is optional; `tfm bench train RECIPE key=value` always starts with it."""
        return argument.kind in ("file", "dir") and not argument.required and self.takes_overrides


@dataclass(frozen=True)
class AppSpec:
    name: str
    options: tuple[Option, ...]
    commands: tuple[Command, ...]
    override_keys: tuple[str, ...]  # dotted recipe keys, for `key=value` arguments


def _first_sentence(text: str | None, limit: int = 100) -> str:
    line = (text or "").strip().split("\n\n")[0].replace("\n", " ")
    line = " ".join(line.split())
    for end in (". ", "; "):
        if end in line:
            line = line.split(end)[0] + ("." if end == ". " else "")
    return line if len(line) <= limit else line[: limit - 3].rstrip() + "..."


def _unwrap(annotation: Any) -> Any:
    """list[X] -> X, X | None -> X."""
    while True:
        origin = typing.get_origin(annotation)
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if origin in (list, tuple, set, frozenset) and args:
            annotation = args[0]
        elif origin is not None and origin is not typing.Literal and len(args) == 1:  # Optional[X], X | None
            annotation = args[0]
        else:
            return annotation


def _value_kind(param: Any) -> tuple[str, tuple[str, ...]]:
    """What a parameter's value is: (kind, choices). Typer >= 0.16 keeps the annotation; older ones a click type."""
    descriptor = getattr(param, "type_descriptor", None)
    if descriptor is not None:
        annotation = _unwrap(descriptor.annotation)
        info = descriptor.parameter_info
        if typing.get_origin(annotation) is typing.Literal:
            return "choice", tuple(sorted(str(v) for v in typing.get_args(annotation)))
        if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
            return "choice", tuple(sorted(str(m.value) for m in annotation))
        if isinstance(annotation, type) and issubclass(annotation, Path):
            dir_only = getattr(info, "dir_okay", True) and not getattr(info, "file_okay", True)
            return ("dir" if dir_only else "file"), ()
        if getattr(descriptor, "file_annotation", None) is not None:
            return "file", ()
    click_type = getattr(param, "type", None)
    if click_type is not None:
        if getattr(click_type, "choices", None):
            return "choice", tuple(sorted(str(c) for c in click_type.choices))
        if type(click_type).__name__ == "Path":
            dir_only = getattr(click_type, "dir_okay", True) and not getattr(click_type, "file_okay", True)
            return ("dir" if dir_only else "file"), ()
        if type(click_type).__name__ == "File":
            return "file", ()
    return "value", ()


def _option(param: Any, command: str = "") -> Option:
    names = tuple(sorted({*param.opts, *param.secondary_opts}))
    multiple = bool(getattr(param, "multiple", False) or getattr(param, "count", False))
    if getattr(param, "is_flag", False) or getattr(param, "count", False):
        return Option(names, _first_sentence(param.help), "flag", multiple=multiple)
    kind, choices = _value_kind(param)
    long = [n for n in names if n.startswith("--")]
    if kind == "value" and long and long[0] in _OPTION_CHOICES:
        kind, choices = "choice", tuple(sorted(_COMMAND_CHOICES.get((command, long[0]), _OPTION_CHOICES[long[0]])))
    elif kind == "value" and long and long[0] in _OPTION_KINDS:
        kind = _OPTION_KINDS[long[0]]
    return Option(names, _first_sentence(param.help), kind, choices, multiple)


def _argument(param: Any) -> Argument:
    kind, choices = _value_kind(param)
    if kind == "value":
        kind = _ARGUMENT_KINDS.get(param.name, "text")
    variadic = param.nargs == -1
    description = _first_sentence(getattr(param, "help", None))
    return Argument(param.name, description, kind, variadic, choices, bool(param.required))


def _params(command: Any, ctx: Any) -> tuple[tuple[Option, ...], tuple[Argument, ...]]:
    options, arguments = [], []
    for param in command.get_params(ctx):  # includes the help option (-h/--help from context_settings)
        if getattr(param, "hidden", False):
            continue
        if param.param_type_name == "option":
            options.append(_option(param, command.name or ""))
        elif param.param_type_name == "argument":
            arguments.append(_argument(param))  # positional order is meaningful: kept
    options.sort(key=lambda o: ([n for n in o.names if n.startswith("--")] or list(o.names))[0])
    return tuple(options), tuple(arguments)


def _subcommands(group: Any, ctx: Any) -> tuple[Command, ...]:
    """The visible commands of a click group (the app, or a group such as `tfm bench`), sorted by name."""
    import typer

    commands = []
    for name in sorted(group.list_commands(ctx)):
        command = group.get_command(ctx, name)
        if command is None or command.hidden:
            continue
        sub = typer.Context(
            command, info_name=name, parent=ctx, resilient_parsing=True, **command.context_settings
        )
        summary = _first_sentence(command.short_help or command.help)
        options, arguments = _params(command, sub)
        subcommands = _subcommands(command, sub) if hasattr(command, "list_commands") else ()
        commands.append(Command(name, summary, options, arguments, subcommands))
    return tuple(commands)


def describe(app: Any = None) -> AppSpec:
    """Walk the Typer app (default: `tfm_cli.cli.app.app`) into plain data the script writers use."""
    import typer

    from tfm_cli.recipe import recipe_keys

    if app is None:
        from tfm_cli.cli.app import app
    group = typer.main.get_command(app)
    ctx = typer.Context(group, info_name=PROG, resilient_parsing=True, **group.context_settings)
    top_options, _ = _params(group, ctx)
    commands = _subcommands(group, ctx)
    for command in commands:
        if any(sub.commands for sub in command.commands):
            raise ValueError(f"`{PROG} {command.name}`: the completion scripts handle command groups one level deep only")
    return AppSpec(PROG, top_options, commands, tuple(sorted(recipe_keys())))


# ------------------------------------------------------------------------------------------------------------
# Script writers
# ------------------------------------------------------------------------------------------------------------


def _header(shell: str, install: str) -> str:
    return (
        f"# {shell} completion for `{PROG}`. Generated by `{GENERATOR}` from the Typer app\n"
        f"# (tfm_cli/cli/app.py): do not edit by hand; rerun that command after changing a command or option.\n"
        f"# {install}\n"
    )


def _words(items: list[str] | tuple[str, ...]) -> str:
    return " ".join(items)


def _bash_value_case(options: tuple[Option, ...], indent: str) -> list[str]:
    """`case $prev in` branches: complete the value of the option just typed."""
    lines = []
    groups: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    for o in options:
        if o.takes_value:
            groups.setdefault((o.kind, o.choices), []).extend(o.names)
    for (kind, choices), names in sorted(groups.items()):
        action = {
            "file": "_tfm_files",
            "dir": "_tfm_dirs",
            "choice": f'COMPREPLY=( $(compgen -W "{_words(choices)}" -- "$cur") )',
            "value": "COMPREPLY=()",  # a value of the user's choosing: nothing to offer
        }[kind]
        lines.append(f"{indent}{'|'.join(sorted(names))}) {action}; return 0 ;;")
    return lines


def _bash_argument_action(command: Command, argument: Argument) -> str:
    actions = {
        "file": "_tfm_files",
        "dir": "_tfm_dirs",
        "override": "_tfm_overrides",
        "choice": f'COMPREPLY=( $(compgen -W "{_words(argument.choices)}" -- "$cur") )',
        "text": "COMPREPLY=()",  # free text: nothing to offer
    }
    action = actions[argument.kind]
    if command.may_be_override(argument):
        action += "; [[ -n $cur ]] && _tfm_overrides"
    return action


def _bash_find_command(
    options: tuple[Option, ...], commands: tuple[Command, ...], first: str, var: str, indent: str
) -> list[str]:
    """Set $var and ${var}_index to the first command word from index `first` on (skipping `options` and their
    values); with none yet, complete those options or the command names and return."""
    value_opts = sorted(n for o in options if o.takes_value for n in o.names)
    names = sorted(n for o in options for n in o.names)
    values = _bash_value_case(options, indent + "        ")
    return [
        f"{indent}for (( i = {first}; i < COMP_CWORD; i++ )); do",
        f"{indent}    word=${{COMP_WORDS[i]}}",
        f"{indent}    case $word in",
        *([f"{indent}        {'|'.join(value_opts)}) (( i++ )) ;;"] if value_opts else []),
        f"{indent}        -*) ;;",
        f"{indent}        *) {var}=$word; {var}_index=$i; break ;;",
        f"{indent}    esac",
        f"{indent}done",
        "",
        f"{indent}if [[ -z ${var} ]]; then",
        *([f"{indent}    case $prev in", *values, f"{indent}    esac"] if values else []),
        f"{indent}    if [[ $cur == -* ]]; then",
        f'{indent}        COMPREPLY=( $(compgen -W "{_words(names)}" -- "$cur") )',
        f"{indent}    else",
        f'{indent}        COMPREPLY=( $(compgen -W "{_words([c.name for c in commands])}" -- "$cur") )',
        f"{indent}    fi",
        f"{indent}    return 0",
        f"{indent}fi",
    ]


def _bash_command(command: Command, index: str, indent: str) -> list[str]:
    """The body of a command's `case` branch; `index` names the variable holding the command word's index."""
    names = sorted(n for o in command.options for n in o.names)
    value_opts = sorted(n for o in command.options if o.takes_value for n in o.names)
    values = _bash_value_case(command.options, indent + "    ")
    out = [
        *([f"{indent}case $prev in", *values, f"{indent}esac"] if values else []),
        f"{indent}if [[ $cur == -* ]]; then",
        f'{indent}    COMPREPLY=( $(compgen -W "{_words(names)}" -- "$cur") )',
        f"{indent}    return 0",
        f"{indent}fi",
    ]
    if command.arguments:
        out += [
            f"{indent}npos=$(_tfm_npos $(( {index} + 1 )) {_words(value_opts)})",
            f"{indent}case $npos in",
        ]
        for position, argument in enumerate(command.arguments):
            label = "*" if argument.variadic else str(position)
            out.append(f"{indent}    {label}) {_bash_argument_action(command, argument)} ;;")
            if argument.variadic:
                break
        out.append(f"{indent}esac")
    return out


def _bash_group(group: Command, indent: str) -> list[str]:
    """The body of a group's `case` branch (`tfm bench`): find its subcommand, then complete as for a command."""
    out = [
        f'{indent}local sub="" sub_index=0',
        *_bash_find_command(group.options, group.commands, "cmd_index + 1", "sub", indent),
        "",
        f"{indent}case $sub in",
    ]
    for command in group.commands:
        out += [f"{indent}    {command.name})", *_bash_command(command, "sub_index", indent + "        ")]
        out.append(f"{indent}        ;;")
    out.append(f"{indent}esac")
    return out


def bash_script(spec: AppSpec) -> str:
    out = [
        _header(
            "Bash",
            f"Use: `source completions/{PROG}.bash` in ~/.bashrc (or copy it to "
            f"~/.local/share/bash-completion/completions/{PROG}).",
        ),
        f'_tfm_recipe_keys="{_words([k + "=" for k in spec.override_keys])}"',
        "",
        "_tfm_files() {",
        "    local IFS=$'\\n'",
        "    compopt -o filenames 2>/dev/null",
        '    COMPREPLY+=( $(compgen -f -- "$cur") )',
        "}",
        "",
        "_tfm_dirs() {",
        "    local IFS=$'\\n'",
        "    compopt -o filenames 2>/dev/null",
        '    COMPREPLY+=( $(compgen -d -- "$cur") )',
        "}",
        "",
        "_tfm_overrides() {",
        '    local keys=( $(compgen -W "$_tfm_recipe_keys" -- "$cur") )',
        "    (( ${#keys[@]} )) || return 0",
        "    compopt -o nospace 2>/dev/null  # the value follows the '=' (set only for a key: a file name takes its space)",
        '    COMPREPLY+=( "${keys[@]}" )',
        "}",
        "",
        "# _tfm_npos START VALUE_OPTIONS...: how many positional words precede the cursor, counting from START.",
        "_tfm_npos() {",
        "    local start=$1 i word n=0 after_dashes=0",
        "    shift",
        '    local value_opts=" $* "',
        "    for (( i = start; i < COMP_CWORD; i++ )); do",
        "        word=${COMP_WORDS[i]}",
        "        if (( after_dashes )); then (( n++ )); continue; fi",
        "        case $word in",
        "            --) after_dashes=1 ;;",
        "            =) (( i++ )) ;;  # `--opt=value` / `key=value`: bash splits the word at =",
        '            -*) [[ $value_opts == *" $word "* && ${COMP_WORDS[i+1]} != "=" ]] && (( i++ )) ;;',
        "            *) (( n++ )) ;;",
        "        esac",
        "    done",
        '    echo "$n"',
        "}",
        "",
        "_tfm() {",
        '    local cur=${COMP_WORDS[COMP_CWORD]} prev="" cmd="" cmd_index=0 i word npos',
        "    (( COMP_CWORD > 0 )) && prev=${COMP_WORDS[COMP_CWORD-1]}",
        "    COMPREPLY=()",
        "    # `--opt=value`: bash splits the word at =, so the option is one or two words back.",
        '    if [[ $cur == "=" ]]; then',
        '        cur=""',
        '    elif [[ $prev == "=" ]] && (( COMP_CWORD >= 2 )); then',
        "        prev=${COMP_WORDS[COMP_CWORD-2]}",
        "    fi",
        '    if [[ $prev != -* && ( ${COMP_WORDS[COMP_CWORD]} == "=" || ${COMP_WORDS[COMP_CWORD-1]} == "=" ) ]]; then',
        "        return 0  # the value of a key=value override",
        "    fi",
        "",
        *_bash_find_command(spec.options, spec.commands, "1", "cmd", "    "),
        "",
        "    case $cmd in",
    ]
    for command in spec.commands:
        out.append(f"        {command.name})")
        if command.commands:
            out += _bash_group(command, "            ")
        else:
            out += _bash_command(command, "cmd_index", "            ")
        out.append("            ;;")
    out += [
        "    esac",
        "    return 0",
        "}",
        "",
        f"complete -F _tfm {PROG}",
        "",
    ]
    return "\n".join(out)


def _zsh_quote(text: str) -> str:
    """Text inside a single-quoted _arguments spec: escape the spec's own syntax and the quote."""
    for char in "\\[]:":
        text = text.replace(char, "\\" + char)
    return text.replace("'", "'\\''")


def _describe_item(name: str, help: str) -> str:
    """A `name:description` entry for _describe: only the name's colons need escaping."""
    return (name.replace(":", "\\:") + ":" + help).replace("'", "'\\''")


def _zsh_action(kind: str, choices: tuple[str, ...], recipe_word: bool = False) -> str:
    if kind == "file":
        return "_tfm_recipe_word" if recipe_word else "_files"
    return {
        "dir": "_files -/",
        "choice": f"({' '.join(choices)})",
        "override": "_tfm_overrides",
        "value": " ",
        "text": " ",
    }[kind]


def _zsh_option(option: Option) -> str:
    names = option.names
    desc = _zsh_quote(option.help)
    exclusive = f"({' '.join(names)})" if len(names) > 1 and not option.multiple else ""
    star = "*" if option.multiple else ""
    if names and any(n in ("--help", "-h", "--version") for n in names):
        exclusive = "(- *)"  # they end the command line
    value, written = "", names
    if option.takes_value:
        message = names[0].lstrip("-").replace("-", " ")
        value = f":{_zsh_quote(message)}:{_zsh_action(option.kind, option.choices)}"
        # the value in the next word or in the same one: `--device=cpu` (`=`), `-mruns/tiny` (`+`); without
        # these, zsh read `--device=cpu` as a positional word and `-fo` as stacked flags
        written = tuple(f"{n}=" if n.startswith("--") else f"{n}+" for n in names)
    if len(written) == 1:
        return f"'{exclusive}{star}{written[0]}[{desc}]{value}'"
    return f"'{exclusive}{star}'{{{','.join(written)}}}'[{desc}]{value}'"


def _zsh_function(*words: str) -> str:
    """The completion function of a command: `_tfm_train`, `_tfm_bench_attention`."""
    return "_".join(["_tfm", *words]).replace("-", "_")


def _zsh_command(function: str, command: Command) -> list[str]:
    specs = [_zsh_option(o) for o in command.options]
    for index, argument in enumerate(command.arguments):
        position = "*" if argument.variadic else str(index + 1)
        message = _zsh_quote(argument.name)
        action = _zsh_action(argument.kind, argument.choices, command.may_be_override(argument))
        specs.append(f"'{position}:{message}:{action}'")
        if argument.variadic:
            break
    out = [f"{function}() {{", "    _arguments -s -S \\"]
    return out + [f"        {s} \\" for s in specs[:-1]] + [f"        {specs[-1]}", "}", ""]


def _zsh_dispatcher(
    function: str, label: str, options: tuple[Option, ...], commands: tuple[Command, ...]
) -> list[str]:
    """A function completing `options` and the name of one of `commands`, then handing the rest of the line to
    that command's function (`_tfm` for the app, `_tfm_bench` for `tfm bench`)."""
    return [
        f"{function}() {{",
        "    local curcontext=$curcontext state line",
        "    typeset -A opt_args",
        "    _arguments -C \\",
        *(f"        {_zsh_option(o)} \\" for o in options),
        "        '1:command:->command' \\",
        "        '*::arg:->args'",
        "    case $state in",
        "        command)",
        "            local -a commands",
        "            commands=(",
        *(f"                '{_describe_item(c.name, c.help)}'" for c in commands),
        "            )",
        f"            _describe -t commands '{label} command' commands",
        "            ;;",
        "        args)",
        "            case $line[1] in",
        *(f"                {c.name}) {function}_{c.name.replace('-', '_')} ;;" for c in commands),
        "            esac",
        "            ;;",
        "    esac",
        "}",
        "",
    ]


def zsh_script(spec: AppSpec) -> str:
    out = [
        f"#compdef {PROG}",
        _header("Zsh", f"Use: put this file as `_{PROG}` in a directory on $fpath, before `compinit` runs."),
        "_tfm_overrides() {",
        "    local -a keys",
        "    keys=(",
        *(f"        '{k}='" for k in spec.override_keys),
        "    )",
        "    compadd -S '' -- $keys  # the value follows the '='",
        "}",
        "",
        "# The first word of `tfm train`/`tfm tokenize`: a recipe file, or (with --resume) already an override.",
        "_tfm_recipe_word() {",
        "    _files",
        "    [[ -n $PREFIX ]] && _tfm_overrides",
        "}",
        "",
    ]
    for command in spec.commands:
        function = _zsh_function(command.name)
        if command.commands:
            for sub in command.commands:
                out += _zsh_command(_zsh_function(command.name, sub.name), sub)
            out += _zsh_dispatcher(function, f"{PROG} {command.name}", command.options, command.commands)
        else:
            out += _zsh_command(function, command)
    out += [
        *_zsh_dispatcher("_tfm", PROG, spec.options, spec.commands),
        "if [[ $funcstack[1] == _tfm ]]; then",
        '    _tfm "$@"',
        "else",
        f"    compdef _tfm {PROG}",
        "fi",
        "",
    ]
    return "\n".join(out)


def _fish_quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _fish_option(condition: str, option: Option) -> str:
    parts = [f"complete -c {PROG} -n {_fish_quote(condition)}"]
    for name in option.names:
        if name.startswith("--"):
            parts.append(f"-l {name[2:]}")
        elif len(name) == 2:
            parts.append(f"-s {name[1:]}")
        else:
            parts.append(f"-o {name[1:]}")
    if option.kind in ("file", "dir"):
        parts.append("-r -F")
    elif option.kind == "choice":
        parts.append(f"-x -a {_fish_quote(' '.join(option.choices))}")
    elif option.kind == "value":
        parts.append("-x")
    parts.append(f"-d {_fish_quote(option.help)}")
    return " ".join(parts)


def _fish_names(condition: str, commands: tuple[Command, ...]) -> list[str]:
    """The names of `commands`, offered while `condition` holds."""
    complete = f"complete -c {PROG} -n {_fish_quote(condition)}"
    return [f"{complete} -a {c.name} -d {_fish_quote(c.help)}" for c in commands]


def _fish_command(condition: str, command: Command, keys: str) -> list[str]:
    """A command's options and arguments, offered while `condition` holds."""
    complete = f"complete -c {PROG} -n {_fish_quote(condition)}"
    out = [_fish_option(condition, o) for o in command.options]
    kinds = {a.kind for a in command.arguments}
    if kinds & {"file", "dir"}:
        out.append(f"{complete} -F")
    if "override" in kinds:
        out.append(f"{complete} -a {_fish_quote(keys)} -d 'recipe override'")
    for argument in command.arguments:
        if argument.kind == "choice":
            out.append(f"{complete} -a {_fish_quote(' '.join(argument.choices))}")
    return out


def fish_script(spec: AppSpec) -> str:
    no_command = f"not __fish_seen_subcommand_from {' '.join(c.name for c in spec.commands)}"
    out = [
        _header("Fish", f"Use: copy this file to ~/.config/fish/completions/{PROG}.fish."),
        f"complete -c {PROG} -f  # no file names unless an option or argument asks for them",
        "",
        "# commands",
        *_fish_names(no_command, spec.commands),
        "",
        "# options before the command",
    ]
    out += [_fish_option(no_command, o) for o in spec.options]
    keys = " ".join(k + "=" for k in spec.override_keys)
    groups = " ".join(c.name for c in spec.commands if c.commands)
    nested = {sub.name for c in spec.commands for sub in c.commands}
    for command in spec.commands:
        condition = f"__fish_seen_subcommand_from {command.name}"
        if command.name in nested:  # `tfm bench train` is not `tfm train`
            condition += f"; and not __fish_seen_subcommand_from {groups}"
        out += ["", f"# {PROG} {command.name}"]
        if not command.commands:
            out += _fish_command(condition, command, keys)
            continue
        subcommands = " ".join(s.name for s in command.commands)
        no_sub = f"{condition}; and not __fish_seen_subcommand_from {subcommands}"
        out += _fish_names(no_sub, command.commands)
        out += [_fish_option(no_sub, o) for o in command.options]
        for sub in command.commands:
            out += ["", f"# {PROG} {command.name} {sub.name}"]
            out += _fish_command(f"{condition}; and __fish_seen_subcommand_from {sub.name}", sub, keys)
    out.append("")
    return "\n".join(out)


WRITERS: dict[str, Callable[[AppSpec], str]] = {
    "tfm.bash": bash_script,
    "tfm.zsh": zsh_script,
    "tfm.fish": fish_script,
}


def generate(app: Any = None) -> dict[str, str]:
    """File name -> script text for every shell."""
    spec = describe(app)
    return {name: write(spec) for name, write in WRITERS.items()}


# ------------------------------------------------------------------------------------------------------------
# Command line
# ------------------------------------------------------------------------------------------------------------


def default_dir() -> Path:
    """The repository's completions/: next to the pyproject.toml above this file, else under the CWD."""
    for parent in Path(__file__).resolve().parents:
        if (parent / "pyproject.toml").is_file() and (parent / "tfm_cli").is_dir():
            return parent / "completions"
    return Path.cwd() / "completions"


def stale_files(directory: Path, scripts: dict[str, str]) -> list[str]:
    """Names of the scripts in `directory` that are missing or differ from `scripts`."""
    stale = []
    for name, text in sorted(scripts.items()):
        path = directory / name
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            stale.append(name)
    return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=GENERATOR,
        description="Write static bash/zsh/fish completion scripts for tfm, generated from its Typer app.",
    )
    parser.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if any script is stale or missing"
    )
    parser.add_argument(
        "dir", nargs="?", type=Path, help="output folder (default: the repository's completions/)"
    )
    args = parser.parse_args(argv)
    directory: Path = args.dir if args.dir is not None else default_dir()
    scripts = generate()
    if args.check:
        stale = stale_files(directory, scripts)
        if stale:
            names = ", ".join(str(directory / n) for n in stale)
            print(f"stale completion scripts: {names}; regenerate them with `{GENERATOR}`", file=sys.stderr)
            return 1
        print(f"completion scripts in {directory} are up to date")
        return 0
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in scripts.items():
        (directory / name).write_text(text, encoding="utf-8")
        print(f"wrote {directory / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
