/**
 * Request authentication in the spec's order: bearer (header, `token` query parameter, `authorization` cookie),
 * APT lookup or JWT verification, session blacklist, strict `x-api-key` check, token type. Hot path: verified
 * tokens, APT records and blacklist answers are kept in memory and dropped on the broadcasts that revoke them.
 * The cache (blacklist) is not the record of a revocation: the session in identity/sessions is. When the cache has
 * no blacklist entry, the session's durable state is asked (`identity.sessions.live`) once per session per node per
 * 30 s, so a revocation holds whatever the cache loses (a restart of the embedded cache, Redis restarted empty).
 * A user's token is decided with what its user holds now: the token's subjects and groups narrowed to the user's
 * current roles and groups, refused when the user is gone or INACTIVE (the user read once per user per node per 30 s,
 * and again at once on USER_CHANGED).
 */
import type { IncomingMessage } from "http";
import type { ServiceBroker } from "moleculer";
import { Aes, decryptEnvelope, sha256Hex } from "../lib/crypto";
import { IpAllowList, normalizeIp } from "../lib/cidr";
import { bearerRefused, forbidden } from "../lib/errors";
import { isCacheUnavailable, type KeyValue } from "../runtime/kv";
import { DEFAULT_LEEWAY_SEC, type JwtKeys } from "../lib/tokens";
import type { TokenClaims } from "../lib/types";
import { userTokenSubjects, type SubjectSource } from "../lib/grant-validation";

export const aptKey = (suffix: string) => `auth:apt:${suffix}`;
export const blacklistKey = (session: string) => `auth:blacklist:${session}`;
/** Long enough to outlive every token of a session (APTs included). */
export const BLACKLIST_TTL_MS = 400 * 24 * 3600 * 1000;

/**
 * Puts a revoked session on the shared blacklist. Only a shortcut: the closed session in the document store is the
 * record of the revocation (nodes without a blacklist answer ask it), so a cache that cannot answer now is skipped
 * rather than failing a revocation that is already durable.
 */
export async function blacklistSession(kv: KeyValue, session: string): Promise<void> {
	await kv.set(blacklistKey(session), "1", BLACKLIST_TTL_MS).catch(ignoreCacheOutage);
}

/** Broadcast to every node when a session (logout, APT deletion, expiry) or an APT is revoked. */
export const SESSION_REVOKED = "auth.session.revoked";
export const APT_REVOKED = "auth.apt.revoked";
/**
 * Broadcast when a user's roles or groups, its username, its state or its existence change, `{ ids }` (the identity
 * service as it writes; the watcher again from the change stream): every node reads those users again.
 */
export const USER_CHANGED = "identity.user.changed";
/** identity: a live user, `{ id }` -> `{ id, username, subjects, status }` or null. */
const USER_ACTION = "identity.users.byId";

/** Whether a change of a user (`op` and its images) concerns the tokens it holds (USER_CHANGED). */
export function userStateChanged(op: string, before: Record<string, unknown> | null | undefined, after: Record<string, unknown> | null | undefined): boolean {
	if (op === "c") return false;
	if (op !== "u" || !before || !after) return true;
	return before.status !== after.status || before.username !== after.username || JSON.stringify(before.subjects ?? []) !== JSON.stringify(after.subjects ?? []);
}

/** The gateway action that applies a revocation on its node (services/api.service.ts). */
export const REVOKE_ACTION = "api.revoke";
/** How long a revocation waits for each gateway's acknowledgement. */
const REVOCATION_ACK_MS = 2000;

/**
 * Tells every node that sessions or APTs are revoked (the broadcasts) and waits until each gateway has applied it
 * (`api.revoke` on every node that runs one, at most REVOCATION_ACK_MS each): a client answered "logged out" finds
 * its token refused on every gateway at once, not once an event has crossed the transporter. A gateway that does not
 * answer in time still refuses the token within 30 s, when its local "live" answer expires (the blacklist and the
 * durable session decide then).
 */
export async function announceRevocation(broker: ServiceBroker, what: { sessions?: string[]; hashes?: string[] }): Promise<void> {
	const sessions = what.sessions ?? [];
	const hashes = what.hashes ?? [];
	if (!sessions.length && !hashes.length) return;
	for (const session of sessions) broker.broadcast(SESSION_REVOKED, { session });
	for (const hash of hashes) broker.broadcast(APT_REVOKED, { hash });
	const endpoints = (
		(broker.registry as unknown as { getActionEndpoints(a: string): { endpoints: Array<{ id: string; isAvailable: boolean }> } | undefined }).getActionEndpoints(REVOKE_ACTION)
			?.endpoints ?? []
	).filter((e) => e.isAvailable);
	await Promise.allSettled(endpoints.map((e) => broker.call(REVOKE_ACTION, { sessions, hashes }, { nodeID: e.id, timeout: REVOCATION_ACK_MS, retries: 0 })));
}

/** `.catch` for cache calls whose answer another path provides: an outage is skipped, anything else still throws. */
export function ignoreCacheOutage(err: unknown): undefined {
	if (isCacheUnavailable(err)) return undefined;
	throw err;
}
const LOCAL_TTL_MS = 30_000;
/**
 * A gateway keeps no "live" answer of its first seconds: the other nodes learn of a node from its INFO packet, which
 * a node busy starting reads late, and a revocation announced by a node that does not know this gateway yet would
 * not reach it (the cached answer would keep a revoked session working up to LOCAL_TTL_MS). During the grace every
 * request asks the shared blacklist (and the durable session when the cache has no entry). Only on a node with a
 * transporter: alone, a node hears every revocation from itself.
 */
const DISCOVERY_GRACE_MS = 10_000;
const MAX_LOCAL = 10_000;

/** The APT record as cached (AES-encrypted) under `auth:apt:<suffix>`. */
export interface AptRecord {
	id: string;
	claims: TokenClaims;
	expires_at: number;
}

/** A user as its tokens are decided now: null when gone or INACTIVE; what it holds per domain, worked out once. */
interface UserNow {
	at: number;
	user: SubjectSource | null;
	held: Map<string, { subjects: Set<string>; groups: Set<string> }>;
}

export interface Authenticated {
	token: TokenClaims;
	kind: "jwt" | "apt";
}

interface ReqLike {
	headers: IncomingMessage["headers"];
	query?: Record<string, unknown>;
	socket?: { remoteAddress?: string };
}

function bounded<K, V>(m: Map<K, V>): Map<K, V> {
	if (m.size >= MAX_LOCAL) m.delete(m.keys().next().value as K);
	return m;
}

/**
 * A bearer that is missing, is no token of the platform (not a JWT of ours, forged or altered, an APT of the wrong
 * form) or has expired answers the interface's one message, `authorization token is required`; which of them it was is
 * in `WWW-Authenticate` (lib/errors.ts bearerRefused), so a copy-paste mistake stays findable.
 */
const NOT_OURS = "not a token of this platform";
const APT_SUFFIX = /^[A-Za-z0-9_-]{16,200}$/;

export function bearerOf(req: ReqLike): string | undefined {
	const h = req.headers.authorization;
	if (typeof h === "string" && h.trim()) {
		const m = /^Bearer\s+(\S+)\s*$/i.exec(h.trim());
		return m ? m[1] : undefined;
	}
	const q = req.query?.token;
	if (typeof q === "string" && q) return q;
	const cookie = req.headers.cookie;
	if (typeof cookie === "string") {
		for (const part of cookie.split(";")) {
			const i = part.indexOf("=");
			if (i > 0 && part.slice(0, i).trim().toLowerCase() === "authorization") {
				let v = part.slice(i + 1).trim();
				try {
					v = decodeURIComponent(v);
				} catch {
					return undefined;
				}
				return v.replace(/^Bearer\s+/i, "") || undefined;
			}
		}
	}
	return undefined;
}

export function callerIp(req: ReqLike, trustProxy: boolean): string {
	if (trustProxy) {
		const fwd = req.headers["x-forwarded-for"];
		const first = (Array.isArray(fwd) ? fwd[0] : fwd)?.split(",")[0]?.trim();
		if (first) return normalizeIp(first);
	}
	return normalizeIp(req.socket?.remoteAddress ?? "");
}

export class Authenticator {
	private jwtCache = new Map<string, TokenClaims>();
	private aptCache = new Map<string, { rec: AptRecord; hash: string; at: number }>();
	private sessionChecked = new Map<string, number>();
	private revoked = new Set<string>();
	/**
	 * The end of the discovery grace. A node without a transporter has no peers: every revocation is made in this
	 * process and applied here at once, so it keeps answers from the start.
	 */
	private readonly graceEnds: number;
	/** Durable checks under way, so a burst of requests of one session asks identity once. */
	private pending = new Map<string, Promise<boolean>>();
	/** TOKEN_LEEWAY_SECONDS: how far ahead of this node's clock a token's `iat`/`nbf` may be. */
	private readonly leewaySec: number;
	/** Users as read (at most LOCAL_TTL_MS ago, dropped on USER_CHANGED), reads under way, and a count of changes heard. */
	private users = new Map<string, UserNow>();
	private usersLoading = new Map<string, Promise<UserNow>>();
	private usersChanged = 0;
	/** Each token's claims as its user is now, per reading of that user: an unchanged user's request allocates nothing. */
	private narrowed = new WeakMap<TokenClaims, { now: UserNow; token: TokenClaims }>();

	constructor(private readonly deps: { jwt: JwtKeys; aes: Aes; kv: KeyValue; broker: ServiceBroker; trustProxy: boolean; leewaySec?: number }) {
		this.graceEnds = deps.broker.transit ? Date.now() + DISCOVERY_GRACE_MS : 0;
		this.leewaySec = deps.leewaySec ?? DEFAULT_LEEWAY_SEC;
	}

	/** Broadcast handlers: a revoked session or APT stops working on this node at once. */
	sessionRevoked(session: string): void {
		if (this.revoked.size >= MAX_LOCAL) this.revoked.clear();
		this.revoked.add(session);
		this.sessionChecked.delete(session);
		this.pending.delete(session);
		for (const [k, c] of this.jwtCache) if (c.session === session) this.jwtCache.delete(k);
		for (const [k, a] of this.aptCache) if (a.rec.claims.session === session) this.aptCache.delete(k);
	}

	aptRevoked(hash: string): void {
		for (const [k, a] of this.aptCache) if (a.hash === hash) this.aptCache.delete(k);
	}

	/** USER_CHANGED: those users are read again by their next request (a read under way is not kept). */
	userChanged(ids: unknown): void {
		this.usersChanged++;
		for (const id of Array.isArray(ids) ? ids : []) {
			if (typeof id !== "string") continue;
			this.users.delete(id);
			this.usersLoading.delete(id);
		}
	}

	async authenticate(req: ReqLike, opts: { allowRevoked?: boolean } = {}): Promise<Authenticated> {
		const bearer = bearerOf(req);
		if (!bearer) throw bearerRefused();
		const now = Date.now();
		let token: TokenClaims;
		let kind: "jwt" | "apt";
		if (bearer.startsWith("APT-")) {
			kind = "apt";
			if (!APT_SUFFIX.test(bearer.slice(4))) throw bearerRefused(NOT_OURS);
			const rec = await this.resolveApt(bearer.slice(4), now);
			if (!rec || rec.expires_at <= now) throw bearerRefused("the API token is deleted or expired");
			token = rec.claims;
		} else {
			kind = "jwt";
			const cached = this.jwtCache.get(bearer);
			if (cached && (cached.exp ?? 0) * 1000 > now) token = cached;
			else {
				// Not yet valid: its issuer's clock runs ahead of this node's beyond the leeway (docs/production.md).
				const v = this.deps.jwt.check(bearer, this.leewaySec);
				if (!v.claims) throw v.notYetValid ? bearerRefused("the token is not yet valid", "token not yet valid") : bearerRefused(v.expired ? "the token has expired" : NOT_OURS);
				token = v.claims;
				bounded(this.jwtCache).set(bearer, token);
			}
		}
		if (!opts.allowRevoked && token.session && (await this.isRevoked(token.session, now))) throw bearerRefused("the session is revoked", "session is revoked");
		if (token.strict) this.checkApiKey(req, token, now);
		if (token.type !== "access") throw bearerRefused("a refresh token cannot call APIs", "refresh tokens cannot call APIs");
		if (token.uid && !opts.allowRevoked) {
			const user = this.userNow(token.uid, now);
			token = this.asUserIsNow(token, user instanceof Promise ? await user : user);
		}
		return { token, kind };
	}

	/**
	 * The token as its user is now: its subjects and groups that the user still holds (never one the token does not
	 * carry: a role added later comes with the next refresh), its app's subject kept; a user gone or INACTIVE refuses
	 * it. The same claims object while nothing was taken away.
	 */
	private asUserIsNow(token: TokenClaims, state: UserNow): TokenClaims {
		if (!state.user) throw bearerRefused("the session is revoked", "session is revoked");
		const memo = this.narrowed.get(token);
		if (memo?.now === state) return memo.token;
		let held = state.held.get(token.domain);
		if (!held) {
			const h = userTokenSubjects(state.user, token.domain);
			state.held.set(token.domain, (held = { subjects: new Set(h.subjects), groups: new Set(h.groups) }));
		}
		const app = token.aid ? `${token.aid}@${token.domain}` : undefined;
		const subject = (token.subject ?? "")
			.split(" ")
			.filter((s) => s && (held!.subjects.has(s) || s === app))
			.join(" ");
		const groups = (token.groups ?? []).filter((g) => held!.groups.has(g));
		let out = token;
		if (subject !== token.subject || groups.length !== (token.groups?.length ?? 0)) {
			out = { ...token, subject };
			if (groups.length) out.groups = groups;
			else delete out.groups;
		}
		this.narrowed.set(token, { now: state, token: out });
		return out;
	}

	/** The user now: kept LOCAL_TTL_MS (not during the discovery grace, nor when a change was heard while reading). */
	private userNow(uid: string, now: number): Promise<UserNow> | UserNow {
		const known = this.users.get(uid);
		if (known && now - known.at < LOCAL_TTL_MS) return known;
		let p = this.usersLoading.get(uid);
		if (!p) {
			const heard = this.usersChanged;
			const loading = (this.deps.broker.call(USER_ACTION, { id: uid }) as Promise<(SubjectSource & { status?: string }) | null>)
				.then((u): UserNow => {
					const state = { at: now, user: u && u.status !== "INACTIVE" ? u : null, held: new Map() };
					if (heard === this.usersChanged && now >= this.graceEnds) bounded(this.users).set(uid, state);
					return state;
				})
				.finally(() => {
					if (this.usersLoading.get(uid) === loading) this.usersLoading.delete(uid);
				});
			this.usersLoading.set(uid, (p = loading));
		}
		return p;
	}

	private async resolveApt(suffix: string, now: number): Promise<AptRecord | null> {
		if (!APT_SUFFIX.test(suffix)) return null;
		const local = this.aptCache.get(suffix);
		if (local && now - local.at < LOCAL_TTL_MS) return local.rec;
		let rec: AptRecord | null = null;
		// Without the cache the document store answers, as after a cache loss.
		const enc = await this.deps.kv.get(aptKey(suffix)).catch(ignoreCacheOutage);
		if (enc) {
			const plain = this.deps.aes.decrypt(enc);
			rec = plain ? (JSON.parse(plain) as AptRecord) : null;
		} else {
			// The cache may have been lost: the document store keeps every APT (hashed), so nothing is lost with it.
			rec = (await this.deps.broker.call("auth.apts.resolve", { suffix })) as AptRecord | null;
		}
		if (rec) bounded(this.aptCache).set(suffix, { rec, hash: sha256Hex(suffix), at: now });
		return rec;
	}

	/**
	 * Whether the session was revoked: this node's broadcasts, then the shared blacklist, then (the cache has no
	 * answer) the durable session record. A live answer is kept 30 s; a revoked one until the node stops.
	 */
	async isRevoked(session: string, now = Date.now()): Promise<boolean> {
		if (this.revoked.has(session)) return true;
		const at = this.sessionChecked.get(session);
		if (at && now - at < LOCAL_TTL_MS) return false;
		let p = this.pending.get(session);
		if (!p) {
			p = this.checkShared(session, now).finally(() => this.pending.delete(session));
			this.pending.set(session, p);
		}
		return p;
	}

	private async checkShared(session: string, now: number): Promise<boolean> {
		// A cache that cannot answer is no answer: the durable record decides (never "not revoked" by default).
		let revoked = !!(await this.deps.kv.get(blacklistKey(session)).catch(ignoreCacheOutage));
		if (!revoked) {
			const state = (await this.deps.broker.call("identity.sessions.live", { id: session })) as { live: boolean } | null;
			revoked = !state?.live;
			// The cache had lost it: put the blacklist entry back, so other nodes need not ask the store.
			if (revoked) await this.deps.kv.set(blacklistKey(session), "1", BLACKLIST_TTL_MS).catch(() => undefined);
		}
		if (revoked) {
			if (this.revoked.size >= MAX_LOCAL) this.revoked.clear();
			this.revoked.add(session);
		} else if (now >= this.graceEnds) bounded(this.sessionChecked).set(session, now);
		return revoked;
	}

	/** The spec's strict sequence, steps 1-7, with its exact messages. */
	private checkApiKey(req: ReqLike, token: TokenClaims, now: number): void {
		const raw = req.headers["x-api-key"];
		const header = Array.isArray(raw) ? raw[0] : raw;
		if (!header) throw forbidden("strict token must have valid api-key");
		const plain = decryptEnvelope(this.deps.aes, header);
		let key: { cid?: unknown; client_id?: unknown; whitelist?: unknown; expiration_date?: unknown } | null = null;
		try {
			key = plain ? JSON.parse(plain) : null;
		} catch {
			key = null;
		}
		if (!key || typeof key !== "object") throw forbidden("api-key is not valid");
		if (key.cid !== token.cid || key.client_id !== token.client_id) throw forbidden("api-key is not valid");
		const exp = typeof key.expiration_date === "number" ? key.expiration_date : typeof key.expiration_date === "string" ? Date.parse(key.expiration_date) : NaN;
		if (!Number.isFinite(exp) || exp <= now) throw forbidden("api-key is not valid");
		if (key.whitelist !== undefined && key.whitelist !== null) {
			if (!Array.isArray(key.whitelist) || key.whitelist.some((e) => typeof e !== "string")) throw forbidden("api-key is not valid");
			if (key.whitelist.length) {
				let list: IpAllowList;
				try {
					list = new IpAllowList(key.whitelist as string[]);
				} catch {
					throw forbidden("api-key is not valid");
				}
				if (!list.has(callerIp(req, this.deps.trustProxy))) throw forbidden("ip whitelist validation failed");
			}
		}
		if (token.type !== "access") throw forbidden("api-key is not valid");
	}
}
