"""The name server, and the broker's side of it.

``routes`` (the route table and the name server's requests), ``kvconfig`` (the KV config),
``settings`` (the name server's own settings), ``admin`` (admin requests answered by the name
server) and ``registration`` (a broker registering at outside name servers).
"""
