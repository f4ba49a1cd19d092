// The page's settings, read from its address: `?vernis=<base URL>&token=<host token>&thread=<UUID>`,
// or the same after `#` (a fragment is never sent to the server that serves this page, so a token
// there stays out of its access log). The fragment wins over the query string.

export const DEFAULT_VERNIS_URL = "http://127.0.0.1:8000";

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/**
 * The settings of `location`, or the problem that stops the page: `{ vernis, token, thread,
 * resumed }` or `{ problem }`. `thread` is the Vernis conversation id (AG-UI's threadId); a new
 * UUID starts a conversation, so `resumed` says whether the address named one to rejoin.
 */
export function readConfig(location) {
  const params = new URLSearchParams(location.search);
  for (const [key, value] of new URLSearchParams(location.hash.replace(/^#/, ""))) {
    params.set(key, value);
  }
  const token = (params.get("token") || "").trim();
  if (!token) {
    return {
      problem:
        "No host token. Open this page as …/#token=<host token> (from `vernis token member@acme.test`), " +
        "and add &vernis=<Vernis URL> when it does not run on " + DEFAULT_VERNIS_URL + ".",
    };
  }
  let vernis;
  try {
    vernis = new URL(params.get("vernis") || DEFAULT_VERNIS_URL);
  } catch {
    return { problem: `"${params.get("vernis")}" is not a URL: vernis= takes Vernis's base URL, like ${DEFAULT_VERNIS_URL}.` };
  }
  if (vernis.protocol !== "http:" && vernis.protocol !== "https:") {
    return { problem: `vernis= must be an http(s) URL, not "${vernis.href}".` };
  }
  const named = params.get("thread");
  if (named && !UUID.test(named)) {
    return { problem: `thread= must be a UUID (a Vernis conversation id), not "${named}".` };
  }
  return {
    vernis: vernis.href.replace(/\/+$/, ""),
    token,
    thread: named || crypto.randomUUID(),
    resumed: Boolean(named),
  };
}

/** The address of this page for `config` with `thread`: what a reload rejoins. */
export function addressOf(location, config, thread) {
  const fragment = new URLSearchParams({ vernis: config.vernis, token: config.token, thread });
  return `${location.pathname}#${fragment}`;
}
