// Sign-in through the deployment's identity provider: OAuth 2.0 authorization code with PKCE
// (S256), done by the browser as a public client. The token endpoint answers an access token
// (a JWT of the tenant's provider, which the gateway verifies: docs/admin.md, "End users"),
// held in memory like an API key. Only the one-time PKCE verifier and state cross the
// redirect, in sessionStorage, and are deleted when the provider sends the person back.

export interface OidcConfig {
  issuer: string;
  client_id: string;
  authorize_url: string;
  token_url: string;
  scope: string;
  label: string;
}

const FLOW_KEY = "weft:oidc-flow";

export async function loadSignInConfig(): Promise<OidcConfig | null> {
  try {
    const resp = await fetch("/console/config.json", { cache: "no-store" });
    if (!resp.ok) return null;
    const body = (await resp.json()) as { oidc: OidcConfig | null };
    return body.oidc;
  } catch {
    return null;
  }
}

function base64url(bytes: Uint8Array): string {
  let text = "";
  for (const b of bytes) text += String.fromCharCode(b);
  return btoa(text).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

function randomToken(): string {
  return base64url(crypto.getRandomValues(new Uint8Array(32)));
}

function redirectUri(): string {
  return `${location.origin}/`;
}

/** Go to the provider's authorization endpoint; it sends the person back to `/`. */
export async function beginSignIn(config: OidcConfig): Promise<void> {
  const verifier = randomToken();
  const state = randomToken();
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(verifier));
  sessionStorage.setItem(FLOW_KEY, JSON.stringify({ verifier, state }));
  const params = new URLSearchParams({
    response_type: "code",
    client_id: config.client_id,
    redirect_uri: redirectUri(),
    scope: config.scope,
    state,
    code_challenge: base64url(new Uint8Array(digest)),
    code_challenge_method: "S256",
  });
  location.assign(`${config.authorize_url}?${params.toString()}`);
}

/** Back from the provider: the access token, or null when this load is no callback. The code
 * and state leave the address bar at once (history.replaceState). */
export async function finishSignIn(config: OidcConfig | null): Promise<string | null> {
  const params = new URLSearchParams(location.search);
  if (!params.has("code") && !params.has("error")) return null;
  history.replaceState(null, "", "/");
  const raw = sessionStorage.getItem(FLOW_KEY);
  sessionStorage.removeItem(FLOW_KEY);
  if (params.has("error")) throw new Error(`the identity provider refused: ${params.get("error")}`);
  const flow = raw ? (JSON.parse(raw) as { verifier: string; state: string }) : null;
  if (!config || !flow || flow.state !== params.get("state")) {
    throw new Error("this sign-in was not started here (state mismatch): sign in again");
  }
  const resp = await fetch(config.token_url, {
    method: "POST",
    headers: { "Content-Type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({
      grant_type: "authorization_code",
      code: params.get("code") ?? "",
      redirect_uri: redirectUri(),
      client_id: config.client_id,
      code_verifier: flow.verifier,
    }),
  });
  const body = (await resp.json().catch(() => ({}))) as { access_token?: string; error?: string };
  if (!resp.ok || !body.access_token) {
    throw new Error(`the identity provider gave no token (${body.error ?? resp.status})`);
  }
  return body.access_token;
}
