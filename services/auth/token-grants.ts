/**
 * POST /auth/token: the four grants of the spec. Credentials are checked by the services that own them
 * (identity for passwords, domain for client secrets); this file decides claims, sessions and rotation.
 */
import type { Context } from "moleculer";
import { randomToken, sha256Hex } from "../../lib/crypto";
import { ApiError, badRequest, unauthorized } from "../../lib/errors";
import type { KeyValue } from "../../lib/kv";
import { scopeSatisfies } from "../../lib/scopes";
import { ACCESS_TTL, REFRESH_TTL, type JwtKeys } from "../../lib/tokens";
import type { TokenClaims } from "../../lib/types";
import { isPlainObject } from "../../lib/validate";
import { usernameProblem, userSubjectProblem } from "../../lib/grant-validation";
import type { ClientInfo } from "../domain.service";
import { blacklistKey, ignoreCacheOutage } from "./authenticate";

export const GRANTS = ["password", "refresh_token", "client_credential", "authorization_code"] as const;
export const LOGIN_LIMIT = 10;
export const LOGIN_WINDOW_MS = 15 * 60 * 1000;
const CODE_TTL_MS = 60_000;
const INVALID_LOGIN = "username or password is invalid";

const FIELDS: Record<string, "string" | "boolean" | "array"> = {
	grant_type: "string", client_id: "string", client_secret: "string", app_id: "string", username: "string", password: "string",
	refresh_token: "string", code: "string", response_type: "string", state: "string", strict: "boolean", domain: "string",
	scopes: "array", subjects: "array", coworkers: "array", source: "string",
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
		if (!t || !Object.prototype.hasOwnProperty.call(FIELDS, k)) throw badRequest(`${k} is not a field of a token request`);
		if (v === undefined || v === null) continue;
		if (t === "string" && (typeof v !== "string" || v.length > 4096)) throw badRequest(`${k} must be a string of at most 4096 characters`);
		if (t === "boolean" && typeof v !== "boolean") throw badRequest(`${k} must be a boolean`);
		if (t === "array" && (!Array.isArray(v) || v.length > 100 || v.some((x) => typeof x !== "string" || x.length > 300)))
			throw badRequest(`${k} must be an array of at most 100 strings`);
	}
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
}

export interface TokenDeps {
	jwt: JwtKeys;
	kv: KeyValue;
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

/** The user exists (not deleted) and is ACTIVE. */
async function activeUser(ctx: Context<unknown, any>, uid: string): Promise<boolean> {
	const u = (await ctx.call("identity.users.byId", { id: uid })) as { status?: string } | null;
	return !!u && u.status !== "INACTIVE";
}

export class TokenIssuer {
	constructor(private readonly deps: TokenDeps) {}

	async handle(ctx: Context<unknown, any>, r: TokenRequest, ip: string): Promise<{ data: Record<string, unknown> }> {
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
				return { data: await this.refresh(ctx, r) };
		}
	}

	private failKey(ip: string) {
		return `auth:fail:${ip}`;
	}

	async assertNotLimited(ip: string): Promise<void> {
		const n = Number((await this.deps.kv.get(this.failKey(ip))) ?? 0);
		if (n >= LOGIN_LIMIT) throw new ApiError(429, "too many failed login attempts from this IP");
	}

	private async fail(ip: string): Promise<never> {
		await this.deps.kv.incr(this.failKey(ip), LOGIN_WINDOW_MS);
		throw unauthorized(INVALID_LOGIN);
	}

	private async login(ctx: Context<unknown, any>, r: TokenRequest, ip: string): Promise<Principal> {
		await this.assertNotLimited(ip);
		const secret = r.grant_type === "client_credential" ? r.client_secret : undefined;
		const client = (await ctx.call("domain.clients.authenticate", { id: r.client_id, secret })) as ClientInfo | null;
		if (!client) return this.fail(ip);
		if (!client.grant_types.includes(r.grant_type) || (r.response_type === "code" && !client.grant_types.includes("authorization_code")))
			throw badRequest(`grant_type ${r.response_type === "code" ? "authorization_code" : r.grant_type} is not allowed for this client`);
		const domain = pickDomain(client, r.domain);
		let heldScopes = client.scopes;
		let aid: string | undefined;
		if (r.app_id) {
			const app = (await ctx.call("domain.apps.lookup", { id: r.app_id })) as { id: string; client: string; scopes: string[] } | null;
			if (!app || app.client !== client.id) throw badRequest("app_id is not an app of the client");
			aid = app.id;
			heldScopes = app.scopes.filter((a) => client.scopes.some((h) => scopeSatisfies(h, a)));
		}
		const scope = grantScopes(heldScopes, r.scopes).join(" ");
		const coworkers = (r.coworkers ?? []).filter((c) => client.coworkers.includes(c));
		let uid: string | undefined;
		let subjects: string[];
		let groups: string[] = [];
		if (r.grant_type === "password") {
			// Only users of this client's tenant, or of the tenants it lists as coworkers, log in through it.
			const tenants = [client.id, ...client.coworkers];
			const user = (await ctx.call("identity.users.verifyLogin", { login: r.username, password: r.password, tenants })) as {
				id: string;
				username?: string;
				subjects: string[];
			} | null;
			if (!user) return this.fail(ip);
			uid = user.id;
			// Only well-formed entries become subjects (stored before validation existed, an entry could hold spaces
			// or an id and pose as another principal).
			const own = user.subjects.filter((s, i) => userSubjectProblem(s, `subjects[${i}]`) === null);
			groups = own.filter((s) => !s.startsWith("@"));
			const named = user.username && usernameProblem(user.username) === null ? [`${user.username}@${domain}`] : [];
			subjects = [...own.map((s) => `${s}@${domain}`), `${user.id}@${domain}`, ...named];
		} else subjects = [`${client.id}@${domain}`];
		if (aid) subjects.push(`${aid}@${domain}`);
		if (r.subjects?.length) {
			// `subjects` narrows, never widens: entries may be given with or without the domain suffix.
			const wanted = new Set(r.subjects.map((s) => (s.endsWith(`@${domain}`) ? s : `${s}@${domain}`)));
			subjects = subjects.filter((s) => wanted.has(s));
		}
		return {
			uid,
			aid,
			cid: client.id,
			client_id: client.id,
			scope,
			domain,
			subject: [...new Set(subjects)].join(" "),
			groups,
			coworker: coworkers.length ? coworkers.join(" ") : undefined,
			strict: r.strict === true,
			tz: "UTC",
			lang: "en",
			withRefresh: r.grant_type === "password",
		};
	}

	private ttls(ctx: Context<unknown, any>, cid: string) {
		return (ctx.call("domain.clients.authenticate", { id: cid }) as Promise<ClientInfo | null>).then((c) => ({
			access: c?.access_token_ttl ?? ACCESS_TTL,
			refresh: c?.refresh_token_ttl ?? REFRESH_TTL,
			live: !!c,
		}));
	}

	/** Opens a session and signs the tokens. */
	private async mint(ctx: Context<unknown, any>, p: Principal, ip: string): Promise<Record<string, unknown>> {
		const ttl = await this.ttls(ctx, p.cid);
		if (!ttl.live) throw unauthorized(INVALID_LOGIN);
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
		if (jti) out.refresh_token = this.deps.jwt.sign({ ...claims, type: "refresh" }, ttl.refresh, jti);
		return out;
	}

	private async issueCode(p: Principal, r: TokenRequest): Promise<Record<string, unknown>> {
		const code = randomToken(32);
		await this.deps.kv.set(`auth:code:${sha256Hex(code)}`, JSON.stringify(p), CODE_TTL_MS);
		return { code, ...(r.state !== undefined ? { state: r.state } : {}) };
	}

	private async exchangeCode(ctx: Context<unknown, any>, r: TokenRequest, ip: string): Promise<Record<string, unknown>> {
		await this.assertNotLimited(ip);
		const raw = await this.deps.kv.take(`auth:code:${sha256Hex(r.code!)}`);
		const p = raw ? (JSON.parse(raw) as Principal) : null;
		// Single use, bound to its client: a code presented by another client is burnt too.
		if (!p || p.client_id !== r.client_id) return this.fail(ip);
		// The user may have been deactivated or deleted since the code was issued.
		if (p.uid && !(await activeUser(ctx, p.uid))) throw unauthorized(INVALID_LOGIN);
		return this.mint(ctx, p, ip);
	}

	private async refresh(ctx: Context<unknown, any>, r: TokenRequest): Promise<Record<string, unknown>> {
		const c = this.deps.jwt.verify(r.refresh_token!);
		if (!c || c.type !== "refresh" || !c.jti || c.client_id !== r.client_id) throw unauthorized();
		// A cache outage skips this shortcut only: the durable state below decides.
		if (await this.deps.kv.get(blacklistKey(c.session)).catch(ignoreCacheOutage)) throw new ApiError(401, "session is revoked");
		// The durable state, whatever the cache lost: the session is open, its user exists and is ACTIVE, its client too.
		const state = (await ctx.call("identity.sessions.live", { id: c.session })) as { live: boolean } | null;
		if (!state?.live) throw new ApiError(401, "session is revoked");
		if (c.uid && !(await activeUser(ctx, c.uid))) throw unauthorized();
		const ttl = await this.ttls(ctx, c.cid);
		if (!ttl.live) throw unauthorized();
		const jti = randomToken(16);
		const rotated = (await ctx.call("identity.sessions.rotate", {
			id: c.session,
			from: sha256Hex(c.jti),
			to: sha256Hex(jti),
			expiration: new Date(Date.now() + ttl.refresh * 1000).toISOString(),
		})) as { ok: boolean };
		if (!rotated.ok) throw unauthorized("refresh token was already used");
		const p: Principal = {
			uid: c.uid,
			aid: c.aid,
			cid: c.cid,
			client_id: c.client_id,
			scope: c.scope,
			domain: c.domain,
			subject: c.subject,
			groups: (c.groups as string[] | undefined) ?? [],
			coworker: c.coworker,
			strict: c.strict,
			tz: c.tz ?? "UTC",
			lang: c.lang ?? "en",
			withRefresh: true,
		};
		return this.sign(p, c.session, ttl, jti);
	}
}
