/**
 * POST /auth/token: the four grants of the spec. Credentials are checked by the services that own them
 * (identity for passwords, domain for client secrets); this file decides claims, sessions and rotation.
 */
import type { Context } from "moleculer";
import { randomToken, sha256Hex } from "../../lib/crypto";
import { ApiError, badRequest, unauthorized } from "../../lib/errors";
import type { KeyValue } from "../../runtime/kv";
import { scopeSatisfies } from "../../lib/scopes";
import { ACCESS_TTL, REFRESH_TTL, type JwtKeys } from "../../lib/tokens";
import type { RequestMeta, TokenClaims } from "../../lib/types";
import { isPlainObject } from "../../lib/validate";
import { userTokenSubjects } from "../../lib/grant-validation";
import { requestedScopeProblem } from "../../lib/oauth-form";
import type { ClientInfo } from "../domain.service";
import { blacklistKey, ignoreCacheOutage } from "../../authority/authenticate";
import { endSession } from "./end-session";
import { UNKNOWN_TENANT, type Account, type LoginLimits } from "./login-limits";

export const GRANTS = ["password", "refresh_token", "client_credential", "authorization_code"] as const;
const CODE_TTL_MS = 60_000;
const INVALID_LOGIN = "username or password is invalid";
const REFRESH_REUSED = "refresh token was already used: its session is revoked, log in again";

/**
 * The 401 of a client secret that does not verify. It names the client_id given, whether or not such a client exists
 * (the answer is the same for both); a client_id that is no client id is not repeated (it may be anything pasted).
 */
function invalidClientSecret(clientId: string): ApiError {
	return unauthorized(
		/^[0-9a-f]{24}$/i.test(clientId) ? `client secret is invalid for client ${clientId}` : "client secret is invalid: client_id is not a client id (24 hex digits)",
	);
}

const FIELDS: Record<string, "string" | "boolean" | "array"> = {
	grant_type: "string",
	client_id: "string",
	client_secret: "string",
	app_id: "string",
	username: "string",
	password: "string",
	refresh_token: "string",
	code: "string",
	response_type: "string",
	state: "string",
	strict: "boolean",
	domain: "string",
	scopes: "array",
	subjects: "array",
	coworkers: "array",
	source: "string",
};

export interface TokenRequest {
	grant_type: string;
	client_id: string;
	client_secret?: string;
	app_id?: string;
	username?: string;
	password?: string;
	refresh_token?: string;
	code?: string;
	response_type?: string;
	state?: string;
	strict?: boolean;
	domain?: string;
	scopes?: string[];
	subjects?: string[];
	coworkers?: string[];
	source?: string;
}

/** Types, sizes and required fields, with the spec's messages; unknown fields are refused by name. */
export function parseTokenRequest(body: unknown): TokenRequest {
	if (!isPlainObject(body)) throw badRequest("body must be a JSON object");
	for (const [k, v] of Object.entries(body)) {
		const t = FIELDS[k];
		// A key that is no field name at all is not repeated: it may be a whole body sent as the wrong type.
		if (!/^[A-Za-z][A-Za-z0-9_]{0,63}$/.test(k))
			throw badRequest(`the body is not a token request: give ${Object.keys(FIELDS).slice(0, 3).join(", ")}, ... as a JSON object or a form`);
		if (!t || !Object.prototype.hasOwnProperty.call(FIELDS, k)) throw badRequest(`${k} is not a field of a token request`);
		if (v === undefined || v === null) continue;
		if (t === "string" && (typeof v !== "string" || v.length > 4096)) throw badRequest(`${k} must be a string of at most 4096 characters`);
		if (t === "boolean" && typeof v !== "boolean") throw badRequest(`${k} must be a boolean`);
		if (t === "array" && (!Array.isArray(v) || v.length > 100 || v.some((x) => typeof x !== "string" || x.length > 300)))
			throw badRequest(`${k} must be an array of at most 100 strings`);
	}
	(body.scopes as string[] | undefined)?.forEach((s, i) => {
		const problem = requestedScopeProblem(s, `scopes[${i}]`);
		if (problem) throw badRequest(problem);
	});
	const r = { ...body } as unknown as TokenRequest;
	// RFC 6749 §4.4 names the grant `client_credentials`; the spec `client_credential`: both are accepted.
	if (r.grant_type === "client_credentials") r.grant_type = "client_credential";
	if (!r.grant_type) throw badRequest("grant_type is required");
	if (!(GRANTS as readonly string[]).includes(r.grant_type)) throw badRequest(`grant_type must be one of ${GRANTS.join(", ")}`);
	if (!r.client_id) throw badRequest("client_id is required");
	if (r.response_type !== undefined && r.response_type !== "code" && r.response_type !== "token") throw badRequest("response_type must be one of code, token");
	const need: Record<string, string[]> = {
		password: ["username", "password"],
		refresh_token: ["refresh_token"],
		client_credential: ["client_secret"],
		authorization_code: ["code"],
	};
	for (const f of need[r.grant_type]) if (!(r as unknown as Record<string, unknown>)[f]) throw badRequest(`${f} is required`);
	return r;
}

/** What a login asked for: a refresh narrows the client's and the user's current scopes and subjects to it again. */
interface Asked {
	/** Requested scopes; absent: all of the client's (or app's). */
	scopes?: string[];
	/** Requested subjects, with the domain suffix; absent: all of the user's. */
	subjects?: string[];
}

/** The basis from which access/refresh tokens are minted (also what an authorization code stands for). */
interface Principal {
	uid?: string;
	aid?: string;
	cid: string;
	client_id: string;
	scope: string;
	domain: string;
	subject: string;
	groups: string[];
	coworker?: string;
	strict: boolean;
	tz: string;
	lang: string;
	withRefresh: boolean;
	/** Carried by the refresh token only (claim `asked`). */
	asked: Asked;
}

export interface TokenDeps {
	jwt: JwtKeys;
	kv: KeyValue;
	limits: LoginLimits;
}

/** Requested scopes narrowed to those the client (or app) holds; none requested means all of them. */
export function grantScopes(held: string[], requested?: string[]): string[] {
	if (!requested || requested.length === 0) return held;
	const out = requested.filter((r) => held.some((h) => scopeSatisfies(h, r)));
	if (out.length === 0) throw badRequest("scopes are not allowed for this client");
	return [...new Set(out)];
}

function pickDomain(client: ClientInfo, requested?: string): string {
	if (requested === undefined) {
		if (!client.domains.length) throw badRequest("domain: the client has no registered domain");
		return client.domains[0];
	}
	if (!client.domains.includes(requested)) throw badRequest("domain is not registered for the client");
	return requested;
}

interface UserInfo {
	id: string;
	username?: string;
	subjects: string[];
	status?: string;
}

/** The user when it exists (not deleted) and is ACTIVE, else null. */
async function activeUser(ctx: Context<unknown, RequestMeta>, uid: string): Promise<UserInfo | null> {
	const u = (await ctx.call("identity.users.byId", { id: uid })) as UserInfo | null;
	return u && u.status !== "INACTIVE" ? u : null;
}

/**
 * The `subject` claim and groups of a principal: a user's subjects, else the client's own; its app's; narrowed to those
 * asked (never widened).
 */
function principalSubjects(user: UserInfo | null, client: ClientInfo, aid: string | undefined, domain: string, asked?: string[]) {
	const { subjects, groups } = user ? userTokenSubjects(user, domain) : { subjects: [`${client.id}@${domain}`], groups: [] };
	if (aid) subjects.push(`${aid}@${domain}`);
	return { subject: [...new Set(asked ? subjects.filter((s) => asked.includes(s)) : subjects)].join(" "), groups };
}

const ttlsOf = (c: ClientInfo) => ({ access: c.access_token_ttl ?? ACCESS_TTL, refresh: c.refresh_token_ttl ?? REFRESH_TTL });

/**
 * The scopes the client holds, or (with `appId`) its app and the app's scopes that the client also holds; null when the
 * app is gone or not the client's.
 */
async function heldScopes(ctx: Context<unknown, RequestMeta>, client: ClientInfo, appId?: string): Promise<{ scopes: string[]; aid?: string } | null> {
	if (!appId) return { scopes: client.scopes };
	const app = (await ctx.call("domain.apps.lookup", { id: appId })) as { id: string; client: string; scopes: string[] } | null;
	if (!app || app.client !== client.id) return null;
	return { scopes: app.scopes.filter((a) => client.scopes.some((h) => scopeSatisfies(h, a))), aid: app.id };
}

export class TokenIssuer {
	constructor(private readonly deps: TokenDeps) {}

	async handle(ctx: Context<unknown, RequestMeta>, r: TokenRequest, ip: string): Promise<{ data: Record<string, unknown> }> {
		switch (r.grant_type) {
			case "password":
			case "client_credential": {
				const principal = await this.login(ctx, r, ip);
				if (r.response_type === "code") return { data: await this.issueCode(principal, r) };
				return { data: await this.mint(ctx, principal, ip) };
			}
			case "authorization_code":
				return { data: await this.exchangeCode(ctx, r, ip) };
			default:
				return { data: await this.refresh(ctx, r, ip) };
		}
	}

	/** The failure counters of guessing `accounts` through `client` (none: the `unknown` tenant) from `ip`. */
	private limits(client: ClientInfo | null, accounts: Account[], ip: string) {
		return this.deps.limits.limits(client?.id ?? UNKNOWN_TENANT, accounts, ip);
	}

	/** Counts a failed guess of `account` (and the tenant's IP-wide failure), then answers it. */
	private async fail(client: ClientInfo | null, account: Account | undefined, ip: string, answer: ApiError = unauthorized(INVALID_LOGIN)): Promise<never> {
		await this.deps.limits.counter.count(this.limits(client, account ? [account] : [], ip));
		throw answer;
	}

	/** The client the request names, looked up only (no secret checked); null when it names no live client. */
	private lookup(ctx: Context<unknown, RequestMeta>, r: TokenRequest): Promise<ClientInfo | null> {
		return ctx.call("domain.clients.authenticate", { id: r.client_id }) as Promise<ClientInfo | null>;
	}

	/**
	 * Holds the request to its failure bounds (429 with Retry-After once one is reached, before any secret is checked:
	 * the right password included), then verifies a presented client secret whatever the grant (RFC 6749 §2.3): a
	 * wrong one is a failed guess of the client's secret, answered naming the client.
	 */
	private async admit(ctx: Context<unknown, RequestMeta>, r: TokenRequest, client: ClientInfo | null, ip: string, account?: Account): Promise<void> {
		const secret = r.client_secret || undefined;
		await this.deps.limits.counter.assertBelow(this.limits(client, [...(secret !== undefined ? (["secret"] as const) : []), ...(account ? [account] : [])], ip));
		if (secret === undefined) return;
		if (!client || !(await ctx.call("domain.clients.authenticate", { id: client.id, secret }))) await this.fail(client, "secret", ip, invalidClientSecret(r.client_id));
	}

	/** The account a password login guesses: the user its login names through the client, else the login's digest. */
	private async passwordAccount(ctx: Context<unknown, RequestMeta>, client: ClientInfo | null, login: string): Promise<Account> {
		const user = client ? ((await ctx.call("identity.users.loginAccount", { login, tenants: [client.id, ...client.coworkers] })) as { id: string } | null) : null;
		return user ? `user.${user.id}` : this.deps.limits.unknownLogin(login);
	}

	private async login(ctx: Context<unknown, RequestMeta>, r: TokenRequest, ip: string): Promise<Principal> {
		const client = await this.lookup(ctx, r);
		const account = r.grant_type === "password" ? await this.passwordAccount(ctx, client, r.username!) : undefined;
		await this.admit(ctx, r, client, ip, account);
		if (!client) return this.fail(null, account, ip);
		if (!client.grant_types.includes(r.grant_type) || (r.response_type === "code" && !client.grant_types.includes("authorization_code")))
			throw badRequest(`grant_type ${r.response_type === "code" ? "authorization_code" : r.grant_type} is not allowed for this client`);
		const domain = pickDomain(client, r.domain);
		const held = await heldScopes(ctx, client, r.app_id);
		if (!held) throw badRequest("app_id is not an app of the client");
		const { aid } = held;
		const scope = grantScopes(held.scopes, r.scopes).join(" ");
		const coworkers = (r.coworkers ?? []).filter((c) => client.coworkers.includes(c));
		let user: UserInfo | null = null;
		if (r.grant_type === "password") {
			// Only users of this client's tenant, or of the tenants it lists as coworkers, log in through it.
			const tenants = [client.id, ...client.coworkers];
			user = (await ctx.call("identity.users.verifyLogin", { login: r.username, password: r.password, tenants })) as UserInfo | null;
			if (!user) return this.fail(client, account, ip);
		}
		// `subjects` narrows, never widens: entries may be given with or without the domain suffix.
		const asked: Asked = {
			...(r.scopes?.length ? { scopes: [...new Set(r.scopes)] } : {}),
			...(r.subjects?.length ? { subjects: [...new Set(r.subjects.map((s) => (s.endsWith(`@${domain}`) ? s : `${s}@${domain}`)))] } : {}),
		};
		return {
			uid: user?.id,
			aid,
			cid: client.id,
			client_id: client.id,
			scope,
			domain,
			...principalSubjects(user, client, aid, domain, asked.subjects),
			coworker: coworkers.length ? coworkers.join(" ") : undefined,
			strict: r.strict === true,
			tz: "UTC",
			lang: "en",
			withRefresh: r.grant_type === "password",
			asked,
		};
	}

	/** Opens a session and signs the tokens. */
	private async mint(ctx: Context<unknown, RequestMeta>, p: Principal, ip: string): Promise<Record<string, unknown>> {
		const client = (await ctx.call("domain.clients.authenticate", { id: p.cid })) as ClientInfo | null;
		if (!client) throw unauthorized(INVALID_LOGIN);
		const ttl = ttlsOf(client);
		const jti = p.withRefresh ? randomToken(16) : undefined;
		const session = (await ctx.call("identity.sessions.open", {
			uid: p.uid,
			aid: p.aid,
			cid: p.cid,
			domain: p.domain,
			ip,
			agent: (ctx.meta.headers?.["user-agent"] as string | undefined)?.slice(0, 1000),
			expiration: new Date(Date.now() + (p.withRefresh ? ttl.refresh : ttl.access) * 1000).toISOString(),
			refresh: jti ? sha256Hex(jti) : undefined,
			coworkers: p.coworker?.split(" "),
		})) as { id: string };
		return this.sign(p, session.id, ttl, jti);
	}

	private sign(p: Principal, session: string, ttl: { access: number; refresh: number }, jti?: string): Record<string, unknown> {
		const claims: Omit<TokenClaims, "iat" | "exp"> = {
			type: "access",
			strict: p.strict,
			cid: p.cid,
			...(p.aid ? { aid: p.aid } : {}),
			...(p.uid ? { uid: p.uid } : {}),
			scope: p.scope,
			domain: p.domain,
			subject: p.subject,
			tz: p.tz,
			lang: p.lang,
			session,
			client_id: p.client_id,
			...(p.coworker ? { coworker: p.coworker } : {}),
			...(p.groups.length ? { groups: p.groups } : {}),
		};
		const out: Record<string, unknown> = {
			token_type: "Bearer",
			access_token: this.deps.jwt.sign(claims, ttl.access),
			expires_in: ttl.access,
			scope: p.scope,
			domain: p.domain,
			subject: p.subject,
			...(p.coworker ? { coworker: p.coworker } : {}),
			session,
		};
		if (jti) out.refresh_token = this.deps.jwt.sign({ ...claims, type: "refresh", asked: p.asked }, ttl.refresh, jti);
		return out;
	}

	private async issueCode(p: Principal, r: TokenRequest): Promise<Record<string, unknown>> {
		const code = randomToken(32);
		await this.deps.kv.set(`auth:code:${sha256Hex(code)}`, JSON.stringify(p), CODE_TTL_MS);
		return { code, ...(r.state !== undefined ? { state: r.state } : {}) };
	}

	private async exchangeCode(ctx: Context<unknown, RequestMeta>, r: TokenRequest, ip: string): Promise<Record<string, unknown>> {
		// The client first (a wrong secret does not spend the code).
		const client = await this.lookup(ctx, r);
		await this.admit(ctx, r, client, ip, "code");
		if (!client) return this.fail(null, "code", ip);
		const raw = await this.deps.kv.take(`auth:code:${sha256Hex(r.code!)}`);
		const p = raw ? (JSON.parse(raw) as Principal) : null;
		// Single use, bound to its client: a code presented by another client is burnt too.
		if (!p || p.client_id !== r.client_id) return this.fail(client, "code", ip);
		// The user may have been deactivated or deleted since the code was issued.
		if (p.uid && !(await activeUser(ctx, p.uid))) throw unauthorized(INVALID_LOGIN);
		return this.mint(ctx, p, ip);
	}

	private async refresh(ctx: Context<unknown, RequestMeta>, r: TokenRequest, ip: string): Promise<Record<string, unknown>> {
		const client = await this.lookup(ctx, r);
		// A refresh guesses nothing: only a presented secret is bounded (an attack on the client's logins from this IP
		// must not end its users' sessions there).
		if (r.client_secret) await this.admit(ctx, r, client, ip);
		const c = this.deps.jwt.verify(r.refresh_token!);
		if (!c || c.type !== "refresh" || !c.jti || c.client_id !== r.client_id) throw unauthorized();
		// A cache outage skips this shortcut only: the durable state below decides.
		if (await this.deps.kv.get(blacklistKey(c.session)).catch(ignoreCacheOutage)) throw new ApiError(401, "session is revoked");
		// The durable state, whatever the cache lost: the session is open, its user exists and is ACTIVE, its client too.
		const state = (await ctx.call("identity.sessions.live", { id: c.session })) as { live: boolean } | null;
		if (!state?.live) throw new ApiError(401, "session is revoked");
		if (!client) throw unauthorized();
		const p = await this.reread(ctx, client, c);
		const ttl = ttlsOf(client);
		const jti = randomToken(16);
		const rotated = (await ctx.call("identity.sessions.rotate", {
			id: c.session,
			from: sha256Hex(c.jti),
			to: sha256Hex(jti),
			expiration: new Date(Date.now() + ttl.refresh * 1000).toISOString(),
		})) as { ok: boolean };
		if (!rotated.ok) {
			// Signed by us for this session, yet no longer its current one: a refresh token presented twice, by its
			// holder or by a thief. Which one cannot be told, so the whole session ends (RFC 9700 §4.14.2).
			await endSession(ctx, this.deps.kv, c.session);
			throw unauthorized(REFRESH_REUSED);
		}
		return this.sign(p, c.session, ttl, jti);
	}

	/**
	 * The principal of a refresh token as its user and client are now (docs/contracts.md "Tenants": a refresh reads the user
	 * and the client again): the user's current roles and groups, the client's (or app's) current scopes and coworkers, each
	 * narrowed to what the login asked (a refresh token of an earlier version: to what it carries). A user that no
	 * longer logs in through the client, an app gone, or a domain the client no longer registers ends the refreshes.
	 */
	private async reread(ctx: Context<unknown, RequestMeta>, client: ClientInfo, c: TokenClaims): Promise<Principal> {
		const asked = (c.asked as Asked | undefined) ?? { scopes: c.scope.split(" ").filter(Boolean), subjects: c.subject.split(" ").filter(Boolean) };
		const held = await heldScopes(ctx, client, c.aid);
		if (!held || !client.domains.includes(c.domain)) throw unauthorized();
		let user: UserInfo | null = null;
		if (c.uid) {
			user = await activeUser(ctx, c.uid);
			const tenants = [client.id, ...client.coworkers];
			if (!user || ((await ctx.call("identity.users.outsideTenant", { tenants, ids: [user.id] })) as { outside: string[] }).outside.length) throw unauthorized();
		}
		const coworkers = (c.coworker?.split(" ") ?? []).filter((x) => client.coworkers.includes(x));
		return {
			uid: c.uid,
			aid: c.aid,
			cid: c.cid,
			client_id: c.client_id,
			scope: grantScopes(held.scopes, asked.scopes).join(" "),
			domain: c.domain,
			...principalSubjects(user, client, c.aid, c.domain, asked.subjects),
			coworker: coworkers.length ? coworkers.join(" ") : undefined,
			strict: c.strict,
			tz: c.tz ?? "UTC",
			lang: c.lang ?? "en",
			withRefresh: true,
			asked,
		};
	}
}
