"""The GitHub REST fetch of the G8 probe (:func:`sparkops.probes.playbooks.fetch_rest` runs it in a
bounded worker). Its own module so that ``urllib.request``, ``http`` and ``ssl`` load only when the
probe goes online: an offline or cached run never imports them.
"""

from __future__ import annotations

import json
import re
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any

from sparkops import __version__
from sparkops.facts.model import PlaybookIssue
from sparkops.facts.reading import Why
from sparkops.facts.redact import redact_text
from sparkops.probes.playbooks import DEFAULT_API, MAX_ISSUES, REPO, FetchError, _timed_out, parse_issues


def _origin(url: str) -> tuple[str, str, int | None]:
    """(scheme, host, port) of ``url``, default ports filled in; an unparsable port never matches."""
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        return scheme, "", -1
    return scheme, (parts.hostname or "").lower(), port or {"https": 443, "http": 80}.get(scheme)


class _AuthOnlyToOrigin(urllib.request.HTTPRedirectHandler):
    """Follows redirects; the token is re-sent only when the new URL has the API's own origin.

    The token travels as an *unredirected* header, which urllib drops on every redirect (it would
    copy an ordinary header to any host, even from https to http); a redirect that stays on the API
    origin (GitHub moves renamed repositories that way) gets it back here.
    """

    def __init__(self, origin: tuple[str, str, int | None], authorization: str) -> None:
        super().__init__()
        self.origin = origin
        self.authorization = authorization

    # urllib before Python 3.11 does not follow 308 (Permanent Redirect), which GitHub uses for moved
    # repositories; for our GET requests it means the same as 307.
    http_error_308 = urllib.request.HTTPRedirectHandler.http_error_302

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: ANN001 - urllib's signature
        if code == 308 and sys.version_info < (3, 11):
            code = 307
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and self.authorization and _origin(new.full_url) == self.origin:
            new.add_unredirected_header("Authorization", self.authorization)
        return new


def _opener(env: Mapping[str, str], host: str,
            redirect: urllib.request.HTTPRedirectHandler | None = None) -> urllib.request.OpenerDirector:
    """Proxies from ``env`` (not this process's environment), bypassed for no_proxy and loopback."""
    no_proxy = [h.strip().lstrip(".").lower() for h in (env.get("no_proxy") or env.get("NO_PROXY") or "").split(",")
                if h.strip()]
    host = host.lower()
    bypass = host in ("localhost", "127.0.0.1", "::1") or "*" in no_proxy or any(
        host == h or host.endswith("." + h) for h in no_proxy)
    proxies: dict[str, str] = {}
    if not bypass:
        for scheme in ("https", "http"):
            value = env.get(f"{scheme}_proxy") or env.get(f"{scheme.upper()}_PROXY")
            if value:
                proxies[scheme] = value
    handlers: list[urllib.request.BaseHandler] = [urllib.request.ProxyHandler(proxies)]
    if redirect is not None:
        handlers.append(redirect)
    return urllib.request.build_opener(*handlers)


def _next_link(header: str | None) -> str | None:
    for part in (header or "").split(","):
        m = re.match(r'\s*<([^>]+)>\s*;\s*rel="next"', part)
        if m:
            return m.group(1)
    return None


def fetch_pages(env: Mapping[str, str], timeout_s: float, deadline: float) -> list[PlaybookIssue]:
    """The REST fetch proper; :func:`~sparkops.probes.playbooks.fetch_rest` runs it in a worker bounded by ``deadline``."""
    base = (env.get("SPARKOPS_GITHUB_API") or DEFAULT_API).rstrip("/")
    url: str | None = f"{base}/repos/{REPO}/issues?state=open&per_page=100"
    api_host = urllib.parse.urlsplit(base).hostname or ""
    api_origin = _origin(base)
    token = env.get("GITHUB_TOKEN") or env.get("GH_TOKEN") or ""
    authorization = f"Bearer {token}" if token else ""
    opener = _opener(env, api_host, _AuthOnlyToOrigin(api_origin, authorization))
    items: list[Any] = []
    pages = 0
    while url and pages < MAX_ISSUES // 100:
        remaining = deadline - time.monotonic()
        if remaining <= 0.05:
            if pages:
                break  # keep the first page rather than nothing
            raise _timed_out(timeout_s)
        req = urllib.request.Request(url, headers={
            "Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28",
            "User-Agent": f"dgx-spark-ops/{__version__}"})
        if authorization and _origin(url) == api_origin:
            # unredirected: urllib would copy an ordinary header to wherever a redirect points
            req.add_unredirected_header("Authorization", authorization)
        try:
            with opener.open(req, timeout=remaining) as resp:
                body = resp.read(8 * 1024 * 1024)
                link = resp.headers.get("Link")
        except urllib.error.HTTPError as exc:
            why = Why.no_permission if exc.code in (401, 403) else Why.error
            hint = " (rate limited?)" if exc.code in (403, 429) else ""
            raise FetchError(f"GitHub API answered HTTP {exc.code}{hint}", why) from None
        except TimeoutError:
            raise _timed_out(timeout_s) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            if isinstance(reason, TimeoutError):
                raise _timed_out(timeout_s) from None
            raise FetchError(f"GitHub API unreachable: {redact_text(str(reason))[:200]}") from None
        try:
            page = json.loads(body)
        except ValueError:
            raise FetchError("GitHub API answered with something that is not JSON") from None
        if not isinstance(page, list):
            raise FetchError(f"GitHub API answered {type(page).__name__}, not a list")
        items.extend(page)
        pages += 1
        url = _next_link(link)
    return parse_issues(items)
