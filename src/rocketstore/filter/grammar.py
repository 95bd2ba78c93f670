"""RocketMQ 4.9's SQL92 selector grammar (``filter/.../SelectorParser.jj``) for lark.

The token and rule set mirror the JavaCC grammar one to one:

| JavaCC                          | here                                                     |
|---------------------------------|----------------------------------------------------------|
| reserved words, IGNORE_CASE     | ``"NOT"i`` … ``"IS"i`` (a longer identifier stays an ID)  |
| DECIMAL_LITERAL                 | ``0`` or ``[1-9][0-9]*`` with an optional ``l``/``L``      |
| FLOATING_POINT_LITERAL          | ``5.5``, ``5.``, ``.5``, ``5E10`` (exponent ``E``, any case)|
| STRING_LITERAL                  | single quotes, ``''`` for a quote                         |
| ID                              | ``[a-z_$][a-z0-9_$]*``, any case                          |
| ``--`` comment                  | only when a line end follows (as JavaCC's LINE_COMMENT)   |
| orExpression … primaryExpr      | ``or_expr`` … ``primary`` (same nesting = same precedence) |

Precedence is JavaCC's, not textbook SQL's: ``NOT`` is a unary operator and binds tighter than
any comparison, so ``NOT a > 1`` means ``(NOT a) > 1`` (which RocketMQ then refuses).
"""
from __future__ import annotations

GRAMMAR = r"""
?start: or_expr

?or_expr: and_expr
        | or_expr OR and_expr            -> or_

?and_expr: eq_expr
         | and_expr AND eq_expr          -> and_

?eq_expr: cmp_expr
        | eq_expr "=" cmp_expr           -> eq
        | eq_expr "<>" cmp_expr          -> ne
        | eq_expr IS NULL                -> is_null
        | eq_expr IS NOT NULL            -> is_not_null

?cmp_expr: unary
         | cmp_expr ">" unary            -> gt
         | cmp_expr ">=" unary           -> ge
         | cmp_expr "<" unary            -> lt
         | cmp_expr "<=" unary           -> le
         | cmp_expr BETWEEN unary AND unary       -> between
         | cmp_expr NOT BETWEEN unary AND unary   -> not_between
         | cmp_expr IN "(" str_list ")"           -> in_
         | cmp_expr NOT IN "(" str_list ")"       -> not_in

str_list: STRING ("," STRING)*

?unary: "+" unary                        -> pos
      | "-" unary                        -> neg
      | NOT unary                        -> not_
      | primary

?primary: literal
        | ID                             -> prop
        | "(" or_expr ")"

literal: STRING | DECIMAL | FLOAT | TRUE | FALSE | NULL

NOT: "NOT"i
AND: "AND"i
OR: "OR"i
BETWEEN: "BETWEEN"i
IN: "IN"i
TRUE: "TRUE"i
FALSE: "FALSE"i
NULL: "NULL"i
IS: "IS"i

FLOAT.2: /[0-9]+\.[0-9]*([eE][+-]?[0-9]+)?/
       | /\.[0-9]+([eE][+-]?[0-9]+)?/
       | /[0-9]+[eE][+-]?[0-9]+/
DECIMAL: /(0|[1-9][0-9]*[lL]?)/
STRING: /'(''|[^'])*'/
ID: /[a-z_$][a-z0-9_$]*/i

LINE_COMMENT.3: /--[^\n\r]*(\n|\r|\r\n)/
BLOCK_COMMENT.3: /\/\*[^*]*\*+([^\/*][^*]*\*+)*\//
WS: /[ \t\n\r\f]+/

%ignore WS
%ignore LINE_COMMENT
%ignore BLOCK_COMMENT
"""
