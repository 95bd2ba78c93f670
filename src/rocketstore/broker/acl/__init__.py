"""RocketMQ 4.9.7's plain ACL: ``plain`` (the rules and the check, pure), ``address`` (remote
address rules) and ``service`` (the permission manager over ``plain_acl.yml``, its file watcher,
the request guard and the ACL admin requests).
"""
