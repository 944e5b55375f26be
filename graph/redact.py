"""Redaction of secrets in command lines and in the structures imported files carry.

Launchers routinely carry credentials on the command line (``--password=…``, ``mysql -pX``,
``PGPASSWORD=…``, ``postgres://bob:pw@db``, ``-H 'Authorization: Bearer …'``). A snapshot is
read by a model and may be shared, so each secret value becomes ``<redacted>`` while the flag
or key name stays: it tells the reader what was there.

Three tables say what is a secret:

- ``TEXT_RULES``: patterns found anywhere inside an argument or a command line string (URL
  credentials, headers, JSON/YAML fragments, token shapes of well-known services);
- ``PROGRAM_RULES``: short flags whose meaning depends on the program (``-p`` is a password
  for mysql and sshpass, a port or a pid elsewhere), keyed on the program's basename;
- the name rules of ``secret_name_kind``: which flag and key names hold a secret; argv
  applies them to ``--name value``, ``--name=value``, ``NAME=value`` and to a secret name
  after a configuration verb (``aws configure set aws_secret_access_key X``).

Every process's command line passes through here, so each text rule is guarded by cheap
substring hints and the common argument (``--lr``, ``0.1``, a path) costs a few ``in`` tests.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from .graph import Graph

REDACTED = "<redacted>"


# ============================================================================ names

# Words that name a secret when they are a whole segment of a name split on - _ . and camelCase
SECRET_WORDS = frozenset(
    {"password", "passwd", "pwd", "pw", "pass", "passphrase", "token", "secret", "secrets",
     "credential", "credentials", "auth", "authorization", "apikey", "cookie", "privatekey",
     "requirepass", "masterauth"}
)  # fmt: skip
# ... or the end of a glued segment: PGPASSWORD, HFTOKEN, OPENAIAPIKEY
SECRET_SUFFIXES = ("password", "passwd", "token", "secret", "apikey", "passphrase")
# A last segment that says the value is *about* the secret, not the secret itself:
# --password-file /run/x, --token-budget 100, --auth-type basic, DB_PASSWORD_PATH
NOT_THE_SECRET = frozenset(
    {"file", "path", "dir", "stdin", "fd", "env", "name", "id", "type", "method", "mode",
     "length", "len", "count", "size", "limit", "budget", "url", "uri", "host", "port", "user",
     "username", "sock", "socket", "helper", "prompt", "policy", "timeout", "ttl", "prefix",
     "required", "enabled"}
)  # fmt: skip
# `key` after one of these always holds a secret (API_KEY, aws_secret_access_key, --wandb-key)
STRONG_KEY_QUALIFIERS = frozenset(
    {"api", "private", "access", "secret", "wandb", "client", "auth", "encryption", "signing",
     "master", "session", "account", "license", "openai", "anthropic", "hf", "huggingface"}
)  # fmt: skip

ALWAYS = "always"  # the value is a secret whatever it looks like
KEY = "key"  # `--key X`, `--sort-key X`: a secret unless the value looks like config (see below)

_CAMEL = re.compile(r"([a-z0-9])([A-Z])")
_SEGMENT_SPLIT = re.compile(r"[-_.]+")


def name_segments(name: str) -> list[str]:
    """``--hf-token`` -> [hf, token]; ``secretAccessKey`` -> [secret, access, key]."""
    return [s for s in _SEGMENT_SPLIT.split(_CAMEL.sub(r"\1_\2", name).lower()) if s]


# Every secret word above contains one of these: most names are ruled out by a few `in` tests
_SECRET_STEMS = ("pass", "pw", "tok", "secret", "cred", "auth", "key", "cookie")


MAX_NAME_CHARS = 256  # longer is no flag or key anyone types; keeps the name cache small


def secret_name_kind(name: str) -> str | None:
    """``ALWAYS`` for a name that holds a secret (``--password``, ``HF_TOKEN``, ``api_key``),
    ``KEY`` for a bare key name (``--key``, ``--sort-key``), ``None`` otherwise."""
    return None if len(name) > MAX_NAME_CHARS else _name_kind(name)


@functools.lru_cache(maxsize=4096)  # the same flag names recur in every process
def _name_kind(name: str) -> str | None:
    low = name.lower()
    if not any(stem in low for stem in _SECRET_STEMS):
        return None
    segments = name_segments(name)
    if not segments or segments[-1] in NOT_THE_SECRET:
        return None
    last = segments[-1]
    if last == "key":
        qualifier = segments[-2] if len(segments) > 1 else None
        return ALWAYS if qualifier in STRONG_KEY_QUALIFIERS else KEY
    if any(s in SECRET_WORDS or s.endswith(SECRET_SUFFIXES) for s in segments):
        return ALWAYS
    return None


# A bare key name's value that is a path, a number or a lowercase word is configuration
# (`--key /etc/tls/key.pem`, `--key 3`, `--sort-key timestamp`), not a credential.
# (compiled by re, and kept in its cache, when a bare key's value is first read: most graphs
# have none, and the patterns compiled at import cost every fresh process)
_CONFIG_LIKE = r"[./~].*|.*/.*|[+-]?\d+(\.\d+)?|[a-z][a-z_.-]*"


def redact_value(kind: str | None, value: str) -> str:
    """The value of a name of ``kind``, redacted if it holds a secret."""
    if kind is None or value == REDACTED or value == "":
        return value
    if kind == KEY and re.fullmatch(_CONFIG_LIKE, value):
        return value
    return REDACTED


# ============================================================================ text rules


class TextRule(NamedTuple):
    """A pattern redacted wherever it occurs in a string. Its regex names the secret
    ``value`` group and, where the secret depends on a name, a ``key`` group that must pass
    ``secret_name_kind``. ``hints``: lowercase substrings one of which must occur before the
    (costlier) regex runs. The regex is compiled when a text first holds a hint: compiling
    all of them costs a fresh process several milliseconds, and most graphs need few. (The
    rules are NamedTuples, as ``ProgramRule``: a dataclass costs a fresh process ~0.5 ms to
    make.)"""

    name: str
    covers: str
    hints: tuple[str, ...]
    regex: str
    bare_quote: str = ""  # quotes an unquoted value replaced (JSON stays JSON)

    @property
    def pattern(self) -> re.Pattern[str]:
        return _compiled(self.regex)

    def apply(self, text: str) -> str:
        return self.pattern.sub(self._redacted, text)

    def _redacted(self, match: re.Match[str]) -> str:
        value = match.group("value")
        bare = value.strip("\"'")
        if bare == REDACTED:
            return match.group(0)
        key = match.groupdict().get("key")
        if key is not None and redact_value(secret_name_kind(key), bare) != REDACTED:
            return match.group(0)
        quote = value[0] if value[:1] in ("'", '"') and len(value) > 1 else self.bare_quote
        start, end = (i - match.start() for i in match.span("value"))
        whole = match.group(0)
        return f"{whole[:start]}{quote}{REDACTED}{quote}{whole[end:]}"


_compiled = functools.cache(re.compile)  # each rule's regex, compiled once when first used


def _token(name: str, covers: str, hints: tuple[str, ...], shape: str) -> TextRule:
    """A credential recognisable by its shape alone, wherever it appears."""
    return TextRule(name, covers, hints, rf"(?<![\w-])(?P<value>{shape})(?![\w-])")


# a quoted string, or a bare value up to a separator (never an object or a list)
_VALUE = r"""(?P<value>"(?:[^"\\]|\\.){0,4096}"|'(?:[^'\\]|\\.){0,4096}'|(?![\[{])[^\s,;}\]"']{1,4096})"""

TEXT_RULES: tuple[TextRule, ...] = (
    TextRule(
        "url-credentials",
        "scheme://user:pw@host: postgres://, mongodb+srv://, redis://:pw@, amqp://, https://",
        ("://",),
        (
            r"(?i)\b[a-z][a-z0-9+.-]{0,31}://[^/\s:@]{0,256}:(?P<value>[^\s/]{1,1024}?)"
            r"(?=@[^@\s/]{0,256}(?:[/?#\s'\"]|$))"
        ),
    ),
    TextRule(
        "url-user-token",
        "a token as a URL's user, without a password: https://TOKEN@host/ (16+ characters "
        "holding a digit and a letter; user names such as git@ stay)",
        ("://",),
        (
            r"(?i)\b[a-z][a-z0-9+.-]{0,31}://(?P<value>(?=[\w.~-]{0,255}\d)(?=[\w.~-]{0,255}[a-z])"
            r"[\w.~-]{16,256})(?=@[^@\s/]{1,256}(?:[/?#\s'\"]|$))"
        ),
    ),
    TextRule(
        "url-query-secret",
        "a secret query parameter: ?api_key=X, &token=X, ?access_token=X (the name decides)",
        ("?", "&"),
        r"[?&](?P<key>[A-Za-z_][\w.-]{0,127})=(?P<value>[^&#\s'\"]{1,4096})",
    ),
    TextRule(
        "bare-credentials",
        "user:pw@host[:port] without a scheme, starting an argument or a value: admin:pw@mq:5672",
        ("@",),
        (
            r"(?:^|(?<=[=\s'\"]))[\w.+-]{1,256}:(?!//)(?P<value>[^\s@/:]{1,1024})"
            r"(?=@(?!sha\d+:)[A-Za-z0-9.-]{1,256}(?::\d{1,5})?(?:[/\s'\"]|$))"
        ),
    ),
    TextRule(
        "header-or-yaml-field",
        "Authorization: Bearer X (the scheme stays), X-Auth-Token: X, password: X, api_key:X",
        (":",),
        (
            r"(?<![\w.-])(?P<key>[A-Za-z_][\w.-]{0,127}):\s{0,64}(?:(?i:bearer|basic|token|digest)\s{1,64})?"
            + _VALUE
        ),
    ),
    TextRule(
        "json-field",
        """{"password": "X"}, {'api_key': 'X'}, "token": 123""",
        ('":', "':", '" :', "' :"),
        r"""(?P<q>["'])(?P<key>[A-Za-z_][\w.-]{0,127})(?P=q)\s{0,64}:\s{0,64}""" + _VALUE,
        bare_quote='"',
    ),
    TextRule(
        "bearer-token",
        "Bearer X on its own (the word stays)",
        ("bearer",),
        r"(?i)\bbearer\s{1,64}(?P<value>[^\s\"',;}]{1,4096})",
    ),
    TextRule(
        "sql-identified-by",
        "IDENTIFIED BY 'X' in SQL passed with -e / -c",
        ("identified",),
        r"(?i)\bidentified\s{1,64}by\s{1,64}(?P<value>'[^']{0,4096}'|\"[^\"]{0,4096}\"|[^\s;]{1,4096})",
    ),
    TextRule(
        "private-key-block",
        "-----BEGIN … PRIVATE KEY----- … (the body, up to its END line or the end)",
        ("private key-----",),
        r"-----BEGIN [A-Z ]{0,32}PRIVATE KEY-----(?P<value>[\s\S]+?)(?=-----END [A-Z ]{0,32}PRIVATE KEY|$)",
    ),
    _token(
        "github-token",
        "ghp_… gho_… ghu_… ghs_… ghr_… github_pat_…",
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
        r"gh[pousr]_[A-Za-z0-9]{30,}|github_pat_\w{30,}",
    ),
    _token("huggingface-token", "hf_… (34 letters and digits)", ("hf_",), r"hf_[A-Za-z0-9]{30,}"),
    _token(
        "sk-api-key",
        "sk-… sk-proj-… sk-ant-… (OpenAI, Anthropic and others)",
        ("sk-",),
        r"sk-[A-Za-z0-9_-]{20,}",
    ),
    TextRule(  # glued to a name or a word by _ or - as well (aws_key_AKIA…, AKIA…_prod)
        "aws-access-key-id",
        "AKIA… ASIA… (20 characters)",
        ("akia", "asia"),
        r"(?<![A-Za-z0-9])(?P<value>A[KS]IA[A-Z0-9]{16})(?![A-Za-z0-9])",
    ),
    _token("slack-token", "xoxb-… xoxp-… xoxa-…", ("xox",), r"xox[abprs]-[A-Za-z0-9-]{10,}"),
    _token("gitlab-token", "glpat-…", ("glpat-",), r"glpat-[\w-]{20,}"),
    _token("google-api-key", "AIza… (39 characters)", ("aiza",), r"AIza[\w-]{35}"),
    _token("jwt", "eyJ….eyJ….signature", ("eyj",), r"eyJ[\w-]{8,}\.eyJ[\w-]{8,}\.[\w-]*"),
)

_ALL_HINTS = re.compile("|".join(re.escape(h) for rule in TEXT_RULES for h in rule.hints))


# The user's own patterns (the config file's `redaction.patterns`), after the built-ins.
_USER_RULES: list[TextRule] = []


def set_user_patterns(patterns: list[str]) -> None:
    """Also redact these regexes (their ``value`` group, else the whole match) from now on,
    in place of any set before."""
    regexes = [p if "(?P<value>" in p else f"(?P<value>{p})" for p in patterns]
    rules = [
        TextRule("user", given, (), regex) for given, regex in zip(patterns, regexes, strict=True)
    ]
    for rule in rules:
        rule.pattern  # noqa: B018 - compiled now: a pattern that is no regex is refused here
    _USER_RULES[:] = rules


def user_patterns() -> list[str]:
    """The patterns :func:`set_user_patterns` set, as given: what a process that collects
    for this one (a cluster node) must apply too."""
    return [rule.covers for rule in _USER_RULES]  # a user rule covers its own pattern


def redact_text(text: str) -> str:
    """Apply every text rule to one string (an argument, or a whole command line)."""
    low = text.lower()
    if _ALL_HINTS.search(low):  # else, the common case: one C-level scan, nothing to do
        for rule in TEXT_RULES:
            if any(hint in low for hint in rule.hints):
                text = rule.apply(text)
    for rule in _USER_RULES:
        text = rule.apply(text)
    return text


# ============================================================================ program rules


class ProgramRule(NamedTuple):
    """Flags that hold a password only for these programs. ``glued`` also reads ``-pX`` and
    ``--user=X``; ``user_colon`` keeps ``user:`` and redacts what follows; ``wraps``: the
    program runs another command whose flags are its own (``sshpass -p X ssh -p 22 host``)."""

    name: str
    programs: frozenset[str]
    flags: tuple[str, ...]
    glued: bool = True
    user_colon: bool = False
    wraps: bool = False
    after: str = ""  # the flags count only after this subcommand (`docker login -p X`)

    def value(self, value: str) -> str:
        if self.user_colon:
            user, colon, password = value.partition(":")
            return f"{user}:{redact_value(ALWAYS, password)}" if colon else value
        return redact_value(ALWAYS, value)

    def glued_flag(self, arg: str) -> str | None:
        """The flag an argument starts with when it carries its value glued on."""
        if not self.glued:
            return None
        for flag in self.flags:
            if flag.startswith("--"):
                if arg.startswith(flag + "="):
                    return flag + "="
            elif arg.startswith(flag) and len(arg) > len(flag):
                return flag
        return None


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


PROGRAM_RULES: tuple[ProgramRule, ...] = (
    ProgramRule(
        "mysql-family",
        _words(
            "mysql mysqladmin mysqldump mysqlimport mysqlshow mysqlcheck mysqlpump mysqlbinlog"
            " mariadb mariadb-dump mariadb-admin"
        ),
        ("-p",),
    ),
    ProgramRule("sshpass", _words("sshpass"), ("-p",), wraps=True),
    ProgramRule("redis-cli", _words("redis-cli valkey-cli"), ("-a",), glued=False),
    ProgramRule(
        "curl-user",
        _words("curl"),
        ("-u", "--user", "-U", "--proxy-user"),
        user_colon=True,
    ),
    ProgramRule(
        "ldap-bind",
        _words("ldapsearch ldapadd ldapmodify ldapdelete ldapwhoami ldappasswd ldapcompare"),
        ("-w",),
    ),
    ProgramRule(
        "registry-login",
        _words("docker podman nerdctl buildah skopeo"),
        ("-p",),
        after="login",
    ),
    ProgramRule("openssl-key", _words("openssl"), ("-k",), glued=False),
    ProgramRule(
        "mongo-tools",
        _words("mongo mongosh mongodump mongorestore mongoexport mongoimport mongostat mongotop"),
        ("-p",),
    ),
)
_PROGRAMS = {program: rule for rule in PROGRAM_RULES for program in rule.programs}
# Commands that run another one: the program whose flags count is found further on
WRAPPERS = _words(
    "env sudo doas nohup nice ionice timeout stdbuf time exec taskset numactl chrt setsid xargs"
    " watch strace ltrace sshpass"
)
# A secret name after one of these words is a setting whose value follows
CONFIG_VERBS = _words("set config configure")
# Shell operators in `sh -c "…"`: the next word is a new command
COMMAND_SEPARATORS = _words("&& || ; | &")
_SHELL_C = re.compile(r"-[a-z]*c\Z")  # a shell's short flags ending in -c: the script follows
_SEPARATOR_ENDS = (";", "&&", "||", "|")  # ... or glued to the word before (`sleep 1; mysql`)
# Shells: the word after their `-c` is a command, and the arguments after that script are its
# "$0 $@", which the script often hands to the program it runs (`sh -c 'mysql "$@"' sh -pX`)
SHELLS = _words("sh bash dash zsh ksh ash busybox")
# htpasswd's -b takes the password from the command line: its last argument
HTPASSWD = "htpasswd"


def _basename(arg: str) -> str:
    return arg.rsplit("/", 1)[-1]


# ============================================================================ argv


_ASSIGNMENT = re.compile(r"(?P<name>-{0,2}[A-Za-z_][\w.-]*)[=:]")  # matched at an offset
_FLAG = re.compile(r"^-{1,2}[A-Za-z][\w.-]*$")
_BARE_NAME = r"^[A-Za-z_][\w.-]*$"  # compiled when a configuration verb is first met

Redactor = Callable[[str], str]


class _ArgvState:
    """What redacting one argument needs to know about the ones before it."""

    __slots__ = (
        "program", "in_wrapper", "verb_seen", "command_start", "pending", "shell", "subcommand"
    )  # fmt: skip

    def __init__(self) -> None:
        self.program: ProgramRule | None = None
        self.in_wrapper = False  # still looking for the program a wrapper runs
        self.verb_seen = False
        self.command_start = True  # the next argument names a program
        self.pending: Redactor | None = None  # how to redact the next value
        self.shell = False  # the program is a shell: its -c starts a command
        self.subcommand = False  # the program's rule's subcommand was seen

    def enter(self, arg: str) -> None:
        """Track the program whose flags are being read (argv[0], or what a wrapper runs)."""
        name = _basename(arg.strip("'\"("))
        rule = _PROGRAMS.get(name)
        if rule is not None or name in WRAPPERS or self.command_start:
            self.program, self.in_wrapper = rule, name in WRAPPERS
            self.shell, self.subcommand = name in SHELLS, False
        elif self.program is not None and self.program.wraps:
            self.program = None  # sshpass's own flags end at the command it runs

    def after_script(self, script: str) -> None:
        """A shell's ``-c`` script was read: the arguments after it are its "$0 $@", read with
        the flags of the program the script runs (or as a command, when it runs "$@")."""
        rules = [_PROGRAMS[word] for word in map(_basename, script.split()) if word in _PROGRAMS]
        self.program = rules[-1] if rules else None
        self.in_wrapper, self.shell, self.subcommand = True, False, True

    def rule(self) -> ProgramRule | None:
        """The program's rule, once its subcommand (if it has one) was seen."""
        rule = self.program
        return rule if rule is not None and (not rule.after or self.subcommand) else None


def redact_argv(argv: list[str]) -> list[str]:
    """Redact secrets in a command's arguments; flag and key names stay."""
    state = _ArgvState()
    out: list[str] = []
    script_next = False
    for arg in argv:
        if state.pending is not None and not arg.startswith("-"):
            out.append(state.pending(arg))
            state.pending = None
            continue
        state.pending = None
        if script_next:  # a shell's -c script: redacted whole, then its program's flags follow
            script_next, state.command_start = False, False
            out.append(redact_cmdline(arg) if " " in arg else redact_text(arg))
            state.after_script(arg)
            continue
        if state.command_start or (state.in_wrapper and not arg.startswith("-") and "=" not in arg):
            state.enter(arg)
        elif state.program is not None and arg == state.program.after:
            state.subcommand = True
        shell_c = state.shell and _SHELL_C.match(arg) is not None  # -c, -lc, -ec…
        state.command_start = arg in COMMAND_SEPARATORS or arg.endswith(_SEPARATOR_ENDS)
        out.append(_redact_arg(arg, state))
        if shell_c:
            # an argument is the script (argv); in a command line split on spaces the script's
            # own words follow, the first one a command
            script_next, state.command_start = True, True
    if HTPASSWD in argv or any(arg.endswith("/" + HTPASSWD) for arg in argv):
        _redact_htpasswd(out)
    return out


def _redact_htpasswd(argv: list[str]) -> None:
    """``htpasswd -b[c…] FILE USER PASSWORD`` and ``htpasswd -nb USER PASSWORD``: with -b the
    last argument of the command is the password."""
    starts = [i for i, arg in enumerate(argv) if _basename(arg) == HTPASSWD]
    for start in starts:
        end = next(
            (i for i in range(start + 1, len(argv)) if argv[i] in COMMAND_SEPARATORS), len(argv)
        )
        args = argv[start + 1 : end]
        batch = any(re.fullmatch(r"-[a-zA-Z]*b[a-zA-Z]*", arg) for arg in args)
        if batch and len([arg for arg in args if not arg.startswith("-")]) >= 2:
            argv[end - 1] = redact_value(ALWAYS, argv[end - 1])


def _redact_arg(arg: str, state: _ArgvState) -> str:
    arg = redact_text(arg)
    if " " in arg:  # a whole command in one argument: `sh -c "mysql -pX db"`
        return redact_cmdline(arg)
    rule = state.rule()
    if rule is not None:
        if arg in rule.flags:
            state.pending = rule.value
            return arg
        glued = rule.glued_flag(arg)
        if glued is not None:
            return glued + rule.value(arg[len(glued) :])
    if "=" in arg or ":" in arg:
        return _redact_assignment(arg)
    if _FLAG.match(arg):
        kind = secret_name_kind(arg)
        if kind is not None:
            state.pending = lambda value: redact_value(kind, value)
        return arg
    if arg.lower() in CONFIG_VERBS:
        state.verb_seen = True
    elif state.verb_seen and re.match(_BARE_NAME, arg) and secret_name_kind(arg) == ALWAYS:
        state.pending = lambda value: redact_value(ALWAYS, value)
    return arg


def _redact_assignment(arg: str) -> str:
    """``--password=X``, ``API_KEY=X``, ``pass:X``; a value that is itself an assignment is
    read again (``--from-literal=password=X``, ``-e=PGPASSWORD=X``). A loop over offsets, so
    ``a=a=a=…`` costs neither stack nor copies."""
    position = 0
    while (match := _ASSIGNMENT.match(arg, position)) is not None:
        kind = secret_name_kind(match.group("name"))
        if kind is not None:
            return arg[: match.end()] + redact_value(kind, arg[match.end() :])
        position = match.end()
    return arg


def redact_cmdline(cmdline: str) -> str:
    """Redact a command line given as one space-separated string (the text rules first see it
    whole, so a header or a JSON fragment split by spaces is still found)."""
    return " ".join(redact_argv(redact_text(cmdline).split(" ")))


# ============================================================================ structures

COMMAND_KEYS = frozenset({"cmdline", "cmd", "command", "command_line", "args", "argv"})


def redact_structure(value: Any) -> Any:
    """Redact a decoded JSON value (environment dicts, a witty file's ``env``, an entity's
    ``details``): a scalar under a secret name, every string and list of strings as a command
    line. Containers are changed in place; iterative, so nesting depth costs no stack."""
    root = [value]
    stack: list[dict[Any, Any] | list[Any]] = [root]
    while stack:
        container = stack.pop()
        items = container.items() if isinstance(container, dict) else enumerate(container)
        for key, item in list(items):
            if isinstance(item, list) and all(isinstance(x, str) for x in item):
                container[key] = redact_argv(item)
            elif isinstance(item, dict | list):
                stack.append(item)
            else:
                container[key] = _redact_scalar(key, item)
    return root[0]


def _redact_scalar(key: object, item: object) -> object:
    kind = secret_name_kind(key) if isinstance(key, str) else None
    if kind is not None and isinstance(item, str | int | float) and not isinstance(item, bool):
        return redact_value(kind, str(item))
    return redact_cmdline(item) if isinstance(item, str) else item


REDACTED_KINDS = frozenset({"process", "thread", "witty_entity"})


def redact_graph(graph: Graph) -> None:
    """Redact an imported graph in place: the command lines of process and thread nodes (and
    of entities of unknown type) and every attribute the model does not declare (a witty
    entity's ``details``, a thread's copy of its process, environments), and the file's own
    extra metadata (a witty file's ``env``). Declared attributes other than command lines
    are typed numbers, CPU lists and paths: not read, which keeps large imports cheap."""
    done: dict[tuple[str, str], Any] = {}  # a large import repeats the same few command lines
    plain: dict[type, frozenset[str]] = {}  # per class: declared attributes, no command line
    for node in graph.nodes.values():
        if node.kind not in REDACTED_KINDS:
            continue
        values = node.__dict__
        skipped = plain.get(type(node))
        if skipped is None:
            skipped = plain[type(node)] = frozenset(node.FIELDS) - COMMAND_KEYS
        for name in values.keys() - skipped:  # one set difference in C per node
            value = values[name]
            if type(value) is not str:
                values[name] = redact_structure({name: value})[name]
            elif (name, value) in done:
                values[name] = done[name, value]
            else:
                values[name] = done[name, value] = redact_structure({name: value})[name]
    extra = graph.meta.model_extra or {}
    for name in list(extra):
        extra[name] = redact_structure({name: extra[name]})[name]
