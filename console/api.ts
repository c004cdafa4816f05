/**
 * The console's only way to the platform: the public REST API with the bearer of the signed-in user. The tokens live
 * in this module's memory only (never localStorage, never a cookie): a reload signs out. The password is sent once,
 * to POST /auth/token, and never kept.
 */

/** The API's error shape (docs/api.md, "Errors"). */
export interface ApiErrorBody {
	statusCode: number;
	message: string;
	error: string;
}

export class HttpError extends Error {
	constructor(
		readonly status: number,
		readonly body: ApiErrorBody,
	) {
		super(body.message || `HTTP ${status}`);
	}
}

export interface Claims {
	uid?: string;
	aid?: string;
	cid: string;
	domain: string;
	subject?: string[];
	scope?: string[];
	session?: string;
	exp?: number;
}

interface Session {
	clientId: string;
	access: string;
	refresh?: string;
	/** Epoch ms when the access token expires. */
	expiresAt: number;
	claims: Claims;
}

let session: Session | undefined;
let refreshTimer: ReturnType<typeof setTimeout> | undefined;
let refreshing: Promise<void> | undefined;
const listeners = new Set<() => void>();

export const onSessionChange = (f: () => void) => (listeners.add(f), () => void listeners.delete(f));
const changed = () => listeners.forEach((f) => f());

export const currentSession = (): Readonly<Session> | undefined => session;
export const accessToken = () => session?.access;

/** `fetch` that never throws for a network failure: it becomes a 503-like error in the API's shape. */
async function send(url: string, init: RequestInit): Promise<Response> {
	try {
		return await fetch(url, init);
	} catch (e) {
		throw new HttpError(0, { statusCode: 0, message: `the platform did not answer (${(e as Error).message})`, error: "Network Error" });
	}
}

async function errorOf(res: Response): Promise<HttpError> {
	const text = await res.text();
	let body: ApiErrorBody;
	try {
		body = JSON.parse(text);
		if (typeof body?.message !== "string") throw new Error();
	} catch {
		body = { statusCode: res.status, message: text.slice(0, 300) || res.statusText, error: res.statusText };
	}
	return new HttpError(res.status, body);
}

/** The token endpoint's answer (docs/api.md, "Tokens"). */
interface TokenAnswer {
	access_token: string;
	refresh_token?: string;
	expires_in: number;
}

async function tokenRequest(body: Record<string, string>): Promise<TokenAnswer> {
	const res = await send("/auth/token", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
	if (!res.ok) throw await errorOf(res);
	return ((await res.json()) as { data: TokenAnswer }).data;
}

/** Claims of a JWT's payload (read only for display and timing: the API decides what the token may do). */
function claimsOf(jwt: string): Claims {
	const part = jwt.split(".")[1] ?? "";
	const json = atob(
		part
			.replace(/-/g, "+")
			.replace(/_/g, "/")
			.padEnd(Math.ceil(part.length / 4) * 4, "="),
	);
	return JSON.parse(new TextDecoder().decode(Uint8Array.from(json, (c) => c.charCodeAt(0))));
}

function adopt(clientId: string, t: TokenAnswer): void {
	session = { clientId, access: t.access_token, refresh: t.refresh_token ?? session?.refresh, expiresAt: Date.now() + t.expires_in * 1000, claims: claimsOf(t.access_token) };
	scheduleRefresh();
	changed();
}

/** Refreshes at 80 % of the access token's life (at least 5 s before it ends): a request never carries an expired token. */
function scheduleRefresh(): void {
	clearTimeout(refreshTimer);
	if (!session?.refresh) return;
	const left = session.expiresAt - Date.now();
	refreshTimer = setTimeout(() => void refresh().catch(() => undefined), Math.max(1000, Math.min(left * 0.8, left - 5000)));
}

/**
 * One refresh at a time: a refresh token is single use, and the same one presented twice revokes the session
 * (docs/api.md, "Tokens"), so concurrent callers share this one.
 */
export function refresh(): Promise<void> {
	const s = session;
	if (!s?.refresh) return Promise.reject(new HttpError(401, { statusCode: 401, message: "signed out", error: "Unauthorized" }));
	refreshing ??= tokenRequest({ grant_type: "refresh_token", client_id: s.clientId, refresh_token: s.refresh })
		.then((t) => {
			if (session === s) adopt(s.clientId, t);
		})
		.catch((e: HttpError) => {
			if (session === s) endSession(`The session ended: ${e.message}`);
			throw e;
		})
		.finally(() => (refreshing = undefined));
	return refreshing;
}

export let signOutReason = "";

function endSession(reason: string): void {
	clearTimeout(refreshTimer);
	session = undefined;
	signOutReason = reason;
	changed();
}

/** The password grant; the password leaves with this request and is not kept. */
export async function signIn(clientId: string, username: string, password: string): Promise<Claims> {
	const t = await tokenRequest({ grant_type: "password", client_id: clientId, username, password });
	signOutReason = "";
	adopt(clientId, t);
	return session!.claims;
}

/** Ends the session on the platform (every token of it stops working), then forgets it here. */
export async function signOut(reason = ""): Promise<void> {
	const token = session?.access;
	endSession(reason);
	if (token) await send("/auth/logout", { method: "POST", headers: { authorization: `Bearer ${token}` } }).catch(() => undefined);
}

export interface Answer<T> {
	status: number;
	data: T;
	etag: string | null;
	headers: Headers;
}

export interface RequestOptions {
	body?: unknown;
	/** Query parameters; objects are sent as JSON (query, pagination, projection). */
	query?: Record<string, unknown>;
	headers?: Record<string, string>;
	/** A body sent as is (a multipart upload). */
	raw?: BodyInit;
	/** Answer the body as a Blob (a download). */
	blob?: boolean;
}

export function withQuery(path: string, query?: Record<string, unknown>): string {
	const q = new URLSearchParams();
	for (const [k, v] of Object.entries(query ?? {})) {
		if (v === undefined || v === "" || v === null) continue;
		q.set(k, typeof v === "string" ? v : JSON.stringify(v));
	}
	const s = q.toString();
	return s ? `${path}?${s}` : path;
}

/**
 * A request with the bearer. Any answer of 400 or more throws an HttpError carrying the API's error body. An
 * expired token (a machine that slept past the refresh) is refreshed once and the request sent again.
 */
export async function api<T = any>(method: string, path: string, opts: RequestOptions = {}, retried = false): Promise<Answer<T>> {
	const headers: Record<string, string> = { ...opts.headers };
	if (session) headers.authorization = `Bearer ${session.access}`;
	let body: BodyInit | undefined = opts.raw;
	if (opts.body !== undefined) {
		headers["content-type"] = "application/json";
		body = JSON.stringify(opts.body);
	}
	const res = await send(withQuery(path, opts.query), { method, headers, body });
	if (res.status === 401 && !retried && session?.refresh && /expired/.test(res.headers.get("www-authenticate") ?? "")) {
		await refresh();
		return api(method, path, opts, true);
	}
	if (res.status === 401 && session && /revoked/.test((await res.clone().text()).slice(0, 500))) endSession("The session was revoked: sign in again.");
	if (!res.ok && res.status !== 304) throw await errorOf(res);
	const data = opts.blob ? await res.blob() : res.status === 204 || res.status === 304 ? undefined : await res.json().catch(() => undefined);
	return { status: res.status, data: data as T, etag: res.headers.get("etag"), headers: res.headers };
}

/** A page of text (the Prometheus metrics), with an optional bearer of its own (METRICS_TOKEN). */
export async function text(path: string, bearer?: string): Promise<string> {
	const res = await send(path, { headers: bearer ? { authorization: `Bearer ${bearer}` } : {} });
	if (!res.ok) throw await errorOf(res);
	return res.text();
}

/** A JSON page answered also with a status of 503 (`/status` tells which dependency is down that way). */
export async function statusPage<T>(path: string): Promise<{ status: number; data: T }> {
	const res = await send(path, {});
	return { status: res.status, data: (await res.json()) as T };
}
