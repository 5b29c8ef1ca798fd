"""Session requests that several suites make against a running daemon (test_e2e_api.py,
test_abuse.py, test_json_hardening.py)."""
import requests


def info(d, sid):
    """GET /v1/sessions/{sid}, asserted to answer 200: its JSON."""
    r = requests.get(d.url("/v1/sessions/%s" % sid), timeout=30)
    assert r.status_code == 200, r.text
    return r.json()
