"""SQL92 selector text → :class:`~.expression.Expr`, as RocketMQ 4.9's ``SelectorParser``.

Theory of operation. The grammar (:mod:`.grammar`) is parsed with lark's LALR parser, fed one
token at a time through its interactive interface so that one JavaCC quirk is kept: the
generated parser never asks for end of input. Parsing stops at the first token that cannot
continue the expression, and whatever follows it is ignored — ``a = 1 b`` is ``a = 1`` and
``a > 1 )`` is ``a > 1`` — while a token that *can* continue it commits to it (``a = 1 AND``
is an error). Like JavaCC, only the token after the expression is read; characters past it
are never looked at. The tree is then built bottom-up through the ``create_*`` factories, which
apply RocketMQ's type checks. Any failure becomes :class:`SelectorSyntaxError`, whose ``str`` is
what RocketMQ's ``MQFilterException`` reports. Compiled expressions are cached (RocketMQ keeps
an LRU of 100).
"""
from __future__ import annotations

from functools import lru_cache

from lark import Lark, Token, Transformer
from lark.exceptions import LarkError, UnexpectedCharacters, UnexpectedInput, VisitError

from . import expression as ex
from .grammar import GRAMMAR

INVALID_SELECTOR = "Invalid MessageSelector. "


class SelectorSyntaxError(ValueError):
    """An expression RocketMQ's ``SqlFilter.compile`` refuses (``MQFilterException``)."""

    def __init__(self, expression: str, detail: str) -> None:
        super().__init__(f"{INVALID_SELECTOR}{detail}")
        self.expression = expression
        self.detail = detail


_PARSER = Lark(GRAMMAR, parser="lalr", lexer="basic", maybe_placeholders=False,
               propagate_positions=False)


def _unquote(tok: str) -> str:
    return tok[1:-1].replace("''", "'")


class _Build(Transformer):
    """lark tree → expression nodes through RocketMQ's factories."""

    def literal(self, items):
        (tok,) = items
        t = tok.type
        if t == "STRING":
            return ex.Const(_unquote(tok))
        if t == "DECIMAL":
            return ex.create_decimal(str(tok))
        if t == "FLOAT":
            return ex.create_float(str(tok))
        return ex.Const({"TRUE": True, "FALSE": False, "NULL": None}[t])

    def prop(self, items):
        return ex.Prop(str(items[0]))

    def str_list(self, items):
        return [_unquote(t) for t in items]

    def pos(self, items):
        return items[0]

    def neg(self, items):
        return ex.Negate(items[0])

    def not_(self, items):
        return ex.create_not(items[-1])

    def or_(self, items):
        return ex.create_logic("OR", items[0], items[-1])

    def and_(self, items):
        return ex.create_logic("AND", items[0], items[-1])

    def eq(self, items):
        return ex.create_equal(items[0], items[1])

    def ne(self, items):
        return ex.create_not_equal(items[0], items[1])

    def is_null(self, items):
        return ex.create_is_null(items[0], negated=False)

    def is_not_null(self, items):
        return ex.create_is_null(items[0], negated=True)

    def gt(self, items):
        return ex.create_compare(">", items[0], items[1])

    def ge(self, items):
        return ex.create_compare(">=", items[0], items[1])

    def lt(self, items):
        return ex.create_compare("<", items[0], items[1])

    def le(self, items):
        return ex.create_compare("<=", items[0], items[1])

    def _parts(self, items):
        return [i for i in items if not isinstance(i, Token)]

    def between(self, items):
        v, lo, hi = self._parts(items)
        return ex.create_between(v, lo, hi)

    def not_between(self, items):
        v, lo, hi = self._parts(items)
        return ex.create_not_between(v, lo, hi)

    def in_(self, items):
        v, values = self._parts(items)
        return ex.create_in(v, values, negated=False)

    def not_in(self, items):
        v, values = self._parts(items)
        return ex.create_in(v, values, negated=True)


def _parse_tree(text: str):
    """Feed tokens until one cannot continue the expression; accept the prefix before it."""
    ip = _PARSER.parse_interactive("")
    for tok in _PARSER.lex(text):
        before = ip.parser_state.copy()  # the LALR stacks only: cheap
        try:
            ip.feed_token(tok)
        except UnexpectedInput as exc:
            ip.parser_state = before
            try:
                return ip.feed_eof()
            except UnexpectedInput:
                raise exc from None
    return ip.feed_eof()


@lru_cache(maxsize=100)
def compile_sql92(text: str) -> ex.Expr:
    """Compile a selector; raises :class:`SelectorSyntaxError` exactly where RocketMQ does."""
    if not isinstance(text, str):
        raise SelectorSyntaxError(str(text), "expression is not a string")
    try:
        tree = _parse_tree(text)
        if isinstance(tree, Token):  # a lone terminal (cannot happen with this grammar)
            raise SelectorSyntaxError(text, f"unexpected {tree}")
        expr = _Build().transform(tree) if not isinstance(tree, ex.Expr) else tree
        return ex.as_boolean(expr)
    except SelectorSyntaxError:
        raise
    except VisitError as exc:
        raise SelectorSyntaxError(text, str(exc.orig_exc)) from exc.orig_exc
    except UnexpectedCharacters as exc:
        raise SelectorSyntaxError(text, f"Lexical error at line {exc.line}, column {exc.column}. "
                                        f"Encountered: {exc.char!r}") from exc
    except UnexpectedInput as exc:
        tok = getattr(exc, "token", None)
        where = f" \"{tok}\" at line {exc.line}, column {exc.column}" if tok else ""
        raise SelectorSyntaxError(text, f"Encountered{where or ' <EOF>'}.") from exc
    except (ex.SelectorBuildError, LarkError, ValueError, RecursionError) as exc:
        raise SelectorSyntaxError(text, str(exc)) from exc
