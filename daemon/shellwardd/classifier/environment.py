"""Environment variables that change what a program is or does.

Choices, and why:
- A variable is judged by its name, wherever it is set: an assignment before a command
  (`LD_PRELOAD=x ls`), a bare assignment (`PATH=./bin:$PATH`), `export`/`declare -x`/`local`/
  `readonly`/`typeset`, a builtin that assigns a named variable (`read PATH`, `printf -v PATH`),
  `env NAME=…`, or the request's own env field. All of them reach the programs that run later,
  so the engine cannot tell which of them matter: every one is treated the same.
- Such a variable makes the rules about the command meaningless (`PATH` picks another `ls`,
  `LD_PRELOAD` loads code into every process, `BASH_ENV` runs a file when bash starts,
  `LESSOPEN` runs a command when less opens a file). The program that will run is not known
  before run time, so the part is non_idempotent/never and takes the strictest flags
  (approval and network): no rule's flag is lowered by hiding the program.
- Names are listed, plus a few families by prefix (`LD_`, `GIT_`, `PYTHON`…), each family
  with the few members agents set every day that change nothing but output or metadata
  (`PYTHONUNBUFFERED`, `GIT_AUTHOR_NAME`). A pager variable set to a plain pager (`cat`)
  changes nothing either. Everything else in a family fails closed: new variables appear in
  every release of these programs, and a missed one is a hole.
- A value that holds `$(…)` or a backtick is code waiting for an arithmetic or `eval`
  context (`x='a[$(rm -rf ~)]'; (( x ))` runs it): the engine classifies such a value as
  code (see ``holds_code``).
"""

from __future__ import annotations

import re

HIJACK_NAMES = frozenset(
    {
        # the shell itself
        "PATH", "BASH_ENV", "ENV", "IFS", "PROMPT_COMMAND", "SHELLOPTS", "BASHOPTS", "PS0",
        "PS1", "PS2", "PS3", "PS4", "CDPATH", "HOME", "BASH_XTRACEFD", "BASH_LOADABLES_PATH",
        "BASH_COMPAT", "EXECIGNORE", "GLOBIGNORE", "INPUTRC", "HISTFILE", "TMOUT",
        "BASH_CMDS", "BASH_ALIASES", "SHELL", "CONFIG_SHELL", "MAKESHELL", "ZDOTDIR",
        "DOCKER_HOST", "DOCKER_CONFIG", "KUBECONFIG",
        # pagers, editors, helpers that programs run
        "PAGER", "MANPAGER", "MANOPT", "SYSTEMD_PAGER", "EDITOR", "VISUAL", "BROWSER",
        "LESSOPEN", "LESSCLOSE", "LESSKEY", "LESS", "LESSEDIT", "LESSSECURE", "SSH_ASKPASS",
        "SUDO_ASKPASS", "SUDO_EDITOR", "TAR_OPTIONS", "GZIP", "XZ_OPT", "ZSTD_CLEVEL",
        "GREP_OPTIONS", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CONFIG_DIRS", "CURL_HOME",
        "WGETRC", "NETRC",
        # the C library and loaders
        "GCONV_PATH", "LOCPATH", "NLSPATH", "HOSTALIASES", "RES_OPTIONS", "GLIBC_TUNABLES",
        "MALLOC_CHECK_", "OPENSSL_CONF", "OPENSSL_ENGINES", "OPENSSL_MODULES", "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        # language runtimes and build tools
        "NODE_OPTIONS", "NODE_PATH", "NODE_REPL_EXTERNAL_MODULE", "PERL5OPT", "PERL5LIB",
        "PERLLIB", "PERL5DB", "RUBYOPT", "RUBYLIB", "GEM_HOME", "GEM_PATH", "BUNDLE_GEMFILE",
        "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS", "CLASSPATH", "MAVEN_OPTS",
        "GRADLE_OPTS", "MAKEFLAGS", "MFLAGS", "MAKEFILES", "MAKELEVEL", "CC", "CXX", "CPP",
        "LD", "AR", "RUSTC", "RUSTC_WRAPPER", "RUSTFLAGS", "RUSTDOCFLAGS", "CARGO_HOME",
        "CARGO_BUILD_RUSTC_WRAPPER", "GOFLAGS", "GOROOT", "GOPATH", "GOTOOLCHAIN", "GOPROXY",
        "GONOSUMDB", "GOINSECURE", "PYTEST_ADDOPTS", "PYTEST_PLUGINS", "TOX_TESTENV_PASSENV",
        "VIRTUAL_ENV", "CONDA_PREFIX", "PIPX_HOME", "UV_PYTHON", "UV_INDEX_URL",
        "UV_EXTRA_INDEX_URL",
    }
)  # fmt: skip

# Families: every member changes a program unless listed in _HARMLESS.
HIJACK_PREFIXES = (
    "LD_", "DYLD_", "BASH_FUNC_", "GIT_", "PYTHON", "NPM_CONFIG_", "YARN_", "PNPM_", "PIP_",
    "UV_", "POETRY_", "CARGO_",
)  # fmt: skip

# Members of a family that only change output, metadata or strictness.
_HARMLESS = frozenset(
    {
        "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE", "PYTHONHASHSEED", "PYTHONIOENCODING",
        "PYTHONUTF8", "PYTHONFAULTHANDLER", "PYTHONNOUSERSITE", "PYTHONSAFEPATH",
        "PYTHONDEVMODE", "PYTHONTRACEMALLOC", "PYTHONLEGACYWINDOWSSTDIO", "PYTHONCOERCECLOCALE",
        "GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_AUTHOR_DATE", "GIT_COMMITTER_NAME",
        "GIT_COMMITTER_EMAIL", "GIT_COMMITTER_DATE", "GIT_TERMINAL_PROMPT", "GIT_OPTIONAL_LOCKS",
        "GIT_FLUSH", "GIT_ADVICE", "GIT_NO_REPLACE_OBJECTS", "GIT_LITERAL_PATHSPECS",
        "CARGO_TERM_COLOR", "CARGO_TERM_VERBOSE", "CARGO_INCREMENTAL", "PIP_NO_INPUT",
        "PIP_DISABLE_PIP_VERSION_CHECK", "PIP_QUIET", "PIP_NO_COLOR", "UV_NO_PROGRESS",
        "NPM_CONFIG_LOGLEVEL", "NPM_CONFIG_COLOR", "NPM_CONFIG_PROGRESS", "NPM_CONFIG_FUND",
        "NPM_CONFIG_AUDIT", "NPM_CONFIG_UPDATE_NOTIFIER",
    }
)  # fmt: skip

# Variables that name a program to run, harmless when that program is a plain pager.
_PROGRAM_VARS = frozenset({"PAGER", "GIT_PAGER", "MANPAGER", "SYSTEMD_PAGER"})
_PLAIN_PAGERS = frozenset({"", "cat", "less", "more", "/bin/cat", "/usr/bin/cat"})

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def variable_name(assignment: str) -> str:
    """The variable an assignment word sets: `PATH+=x` and `a[1]=x` set PATH and a;
    `BASH_FUNC_f%%=…` (only valid in an environment) is kept whole."""
    name = assignment.partition("=")[0]
    if name.endswith("+"):
        name = name[:-1]
    match = _NAME.match(name)
    if match is None:
        return name
    if name.startswith("BASH_FUNC_"):
        return name
    return match.group(0)


def hijacks(name: str, value: str | None = None) -> bool:
    """True when setting ``name`` (to ``value``, if known) may change which program runs,
    what it loads or executes, or where it reads its configuration."""
    if name in _PROGRAM_VARS and value is not None and value.strip() in _PLAIN_PAGERS:
        return False
    if name in HIJACK_NAMES or name in _PROGRAM_VARS:
        return True
    upper = name.upper()
    # npm and yarn also read their variables in lower case (`npm_config_script_shell`).
    return upper not in _HARMLESS and upper.startswith(HIJACK_PREFIXES)


def holds_code(value: str) -> bool:
    """True when ``value`` holds a command substitution that arithmetic evaluation (array
    subscripts) or `eval` would run."""
    return "$(" in value or "`" in value or "<(" in value or ">(" in value
