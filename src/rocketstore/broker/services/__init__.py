"""The broker's background services, each with ``start()``/``stop()``: ``writer`` (the put
thread), ``longpoll`` (suspended pulls), ``schedule`` (delay levels) and ``transaction`` (half
messages, END_TRANSACTION's work and the check service).
"""
