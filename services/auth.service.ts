/**
 * auth: tokens (POST /auth/token), verify, logout, TOTP check, /auth/can, failed-login blocks, personal tokens (apts) and grants.
 * Seeds the root client, user and grants on the first start (docs/contracts.md "Start-up and the first credentials"), printing generated values once.
 */
import { AUTHORITY_CHANGED } from "../lib/contracts";
import path from "path";
import type { Context } from "moleculer";
import { auth } from "../catalog/domains/auth";
import { DOMAINS } from "../catalog";
import { collectionMixin, platformContext, platformDoc, type Ctx, type EngineService } from "../engine/collection.mixin";
import { asSchema, type ServiceOf } from "../lib/service";
import { createStore, type StoredDoc } from "../stores";
import { runOnce, type Holding } from "../runtime/seed-once";
import { Aes, decryptEnvelope, objectId, randomToken, sha256Hex } from "../lib/crypto";
import { configOf, loadKeys, readJson, writePrivateJson, type PlatformConfig } from "../runtime/config";
import { ApiError, badRequest, forbidden, notFound } from "../lib/errors";
import { expandRbac, validateGrant, type Grant } from "../lib/grants";
import { sharedKeyValue, type KeyValue } from "../runtime/kv";
import { checkTotp, TOTP_FAIL_LIMIT, TOTP_FAIL_WINDOW_MS, TOTP_IP_FAIL_LIMIT, TOTP_LIMITS, TOTP_USER_FAIL_LIMIT } from "../lib/totp";
import { APT_DEFAULT_TTL_MS, JwtKeys, publicClaims } from "../lib/tokens";
import type { TokenClaims } from "../lib/types";
import { isPlainObject } from "../lib/validate";
import { grantCache } from "../authority/grant-cache";
import { checkGrant, checkScope, subjectsOf } from "../authority/authority";
import { hasParsedScope, parseScopes, scopeSatisfies } from "../lib/scopes";
import { aptKey, ignoreCacheOutage, type AptRecord } from "../authority/authenticate";
import { endSession } from "./auth/end-session";
import { parseTokenRequest, TokenIssuer } from "./auth/token-grants";
import { FailureCounter, type FailureLimit } from "./auth/failure-limits";
import { LoginLimits, parseBlockId, type BlockFilter } from "./auth/login-limits";
import { callerClient, type ClientInfo } from "./domain.service";
import type { GrantAuthor } from "../lib/grant-validation";

export { SESSION_REVOKED, APT_REVOKED } from "../authority/authenticate";
/** The longest an APT may live (docs/contracts.md, "Tenants"). */
export const APT_MAX_TTL_MS = 365 * 24 * 3600 * 1000;

type AuthThis = EngineService & {
	cfg: PlatformConfig;
	kv: KeyValue;
	totpFailures: FailureCounter;
	loginLimits: LoginLimits;
	aes: Aes;
	jwt: JwtKeys;
	issuer: TokenIssuer;
	can(ctx: Ctx): Promise<unknown>;
	seedRoot(): Promise<void>;
	seedRootNow(file: string, h: Holding): Promise<void>;
};

/** Caches the APT record (encrypted) under `auth:apt:<suffix>` until it expires. */
async function cacheApt(self: AuthThis, suffix: string, rec: AptRecord) {
	// A copy only: without the cache, authentication resolves the APT from the store (apts.resolve).
	await self.kv.set(aptKey(suffix), self.aes.encrypt(JSON.stringify(rec)), Math.max(1, rec.expires_at - Date.now())).catch(ignoreCacheOutage);
}

function aptRecord(doc: StoredDoc): AptRecord {
	return { id: doc.id, claims: doc.claims as TokenClaims, expires_at: doc.expires_at as number };
}

/**
 * The domains whose subjects the caller may grant: its client's; every registered domain for the operator (a token of
 * the seeded root client), which manages every tenant (docs/contracts.md "Tenants").
 */
async function callerDomains(ctx: Ctx): Promise<{ domains: string[]; who: GrantAuthor }> {
	const client = await callerClient(ctx);
	if (client?.operator) return { domains: (await ctx.call("domain.clients.registeredDomains")) as string[], who: { operator: true } };
	return { domains: client?.domains ?? [], who: { cid: ctx.meta.token?.cid } };
}

const AuthService: ServiceOf<AuthThis> = {
	name: "auth",
	dependencies: ["domain", "identity", "context"],
	mixins: [
		collectionMixin(auth, {
			apts: {
				async beforeCreate(ctx: Ctx, doc: StoredDoc) {
					const self = ctx.service as unknown as AuthThis;
					const t = ctx.meta.token!;
					if (ctx.meta.tokenKind !== "jwt") throw forbidden("an APT is created with a JWT");
					const now = Date.now();
					const expires = doc.expires_at === undefined ? now + APT_DEFAULT_TTL_MS : (doc.expires_at as number);
					if (!Number.isFinite(expires) || expires <= now) throw badRequest("expires_at must be in the future");
					if (expires > now + APT_MAX_TTL_MS) throw badRequest("expires_at must be within 365 days");
					// A strict token makes strict APTs only: an APT must not shed the x-api-key requirement of its creator.
					const strict = t.strict === true || doc.strict === true;
					const held = t.scope.split(" ").filter(Boolean);
					const scopes = (doc.scopes as string[] | undefined) ?? held;
					for (const s of scopes) if (!held.some((h) => scopeSatisfies(h, s))) throw forbidden(`scope ${s} is not held by the caller`);
					const mine = subjectsOf(t);
					const subjects = (doc.subjects as string[] | undefined) ?? mine;
					for (const s of subjects) if (!mine.includes(s)) throw forbidden(`subject ${s} is not held by the caller`);
					// Only coworkers registered on the caller's client are kept (the others are dropped, as at /auth/token).
					const registered = (await callerClient(ctx))?.coworkers ?? [];
					const coworkers = [...new Set((doc.coworkers as string[] | undefined) ?? [])].filter((c) => registered.includes(c));
					const suffix = randomToken(32);
					const session = (await ctx.call("identity.sessions.open", {
						uid: t.uid,
						aid: t.aid,
						cid: t.cid,
						domain: t.domain,
						ip: ctx.meta.ip,
						agent: `apt:${String(doc.name).slice(0, 200)}`,
						expiration: new Date(expires).toISOString(),
					})) as { id: string };
					const claims: TokenClaims = {
						type: "access",
						strict,
						cid: t.cid,
						...(t.aid ? { aid: t.aid } : {}),
						...(t.uid ? { uid: t.uid } : {}),
						scope: scopes.join(" "),
						domain: t.domain,
						subject: subjects.join(" "),
						tz: t.tz ?? "UTC",
						lang: t.lang ?? "en",
						session: session.id,
						client_id: t.client_id,
						...(t.coworker || coworkers.length ? { coworker: [...new Set([...(t.coworker?.split(" ") ?? []), ...coworkers])].join(" ") } : {}),
						...(t.groups?.length ? { groups: t.groups } : {}),
						// Same claims as a JWT (GET /auth/verify): issued now, valid until expires_at.
						iat: Math.floor(now / 1000),
						exp: Math.floor(expires / 1000),
					};
					Object.assign(doc, { scopes, subjects, strict, expires_at: expires, coworkers, token: sha256Hex(suffix), claims, session: session.id });
					doc.clients = [...new Set([...(doc.clients as string[]), ...coworkers])];
					await cacheApt(self, suffix, aptRecord(doc));
					return { token: `APT-${suffix}` };
				},
				beforePatch(ctx: Ctx, set: Record<string, unknown>) {
					// The claims were fixed at creation; only labels and metadata may change.
					for (const k of ["scopes", "subjects", "strict", "expires_at", "coworkers"]) if (k in set) throw badRequest(`${k} cannot be changed; create a new APT`);
				},
				beforeRestore() {
					// Its session was closed for good when it was deleted (the durable record of the revocation).
					throw badRequest("a revoked APT cannot be restored; create a new one");
				},
				async afterWrite(ctx: Ctx, op, before) {
					// Soft delete or destroy revokes at once on every node: the session is closed (durably), blacklisted in
					// the cache, and the cached record dropped.
					if (op === "d" && before) await endSession(ctx, (ctx.service as unknown as AuthThis).kv, before.session as string, [before.token as string]);
				},
			},
			grants: {
				async beforeCreate(ctx: Ctx, doc: StoredDoc) {
					const { domains, who } = await callerDomains(ctx);
					validateGrant(doc, domains, who);
				},
				async beforePatch(ctx: Ctx, set: Record<string, unknown>, before: StoredDoc | null) {
					// A bulk patch has no single `before`: the changed fields are checked against a neutral base.
					const { domains, who } = await callerDomains(ctx);
					const base = before ?? { subject: `${"0".repeat(24)}@${domains[0]}`, action: "read", object: "auth:*" };
					validateGrant(pickGrant({ ...base, ...set }), domains, who);
				},
				afterWrite(ctx: Ctx) {
					ctx.broadcast(AUTHORITY_CHANGED, {});
				},
			},
		}),
	],

	created(this: AuthThis) {
		const cfg = configOf(this.broker);
		const keys = loadKeys(cfg);
		this.cfg = cfg;
		this.kv = sharedKeyValue(cfg.redisUrl, cfg.redisPrefix);
		this.aes = new Aes(keys.aesSecret);
		this.jwt = new JwtKeys(keys.jwtSecret);
		this.loginLimits = new LoginLimits(this.kv, keys.aesSecret);
		this.issuer = new TokenIssuer({ jwt: this.jwt, kv: this.kv, limits: this.loginLimits });
		this.totpFailures = new FailureCounter(this.kv, TOTP_FAIL_WINDOW_MS);
	},

	async started(this: AuthThis) {
		await this.seedRoot();
	},

	actions: {
		token: {
			async handler(this: AuthThis, ctx: Ctx) {
				const body = ctx.params.body;
				const r = parseTokenRequest(body);
				return this.issuer.handle(ctx, r, ctx.meta.ip ?? "unknown");
			},
		},
		verify: {
			handler(this: AuthThis, ctx: Ctx) {
				return { data: publicClaims(requireToken(ctx)) };
			},
		},
		logout: {
			async handler(this: AuthThis, ctx: Ctx) {
				const t = requireToken(ctx);
				// GET and POST: the bearer names the session; a body naming something else would not be what ends.
				const body = ctx.params.body;
				if (body !== undefined && (!isPlainObject(body) || Object.keys(body).length)) throw badRequest("POST /auth/logout takes no body: it ends the session of the bearer token");
				await endSession(ctx, this.kv, t.session);
				return { result: "OK" };
			},
		},
		check: {
			async handler(this: AuthThis, ctx: Ctx) {
				const t = requireToken(ctx);
				const b = ctx.params.body;
				if (!isPlainObject(b)) throw badRequest("body must be a JSON object");
				for (const k of Object.keys(b)) if (!["secret", "token", "period", "window"].includes(k)) throw badRequest(`${k} is not a field of a TOTP check`);
				if (typeof b.secret !== "string" || !b.secret || b.secret.length > 4096) throw badRequest("secret is required");
				if (typeof b.token !== "string" || !b.token) throw badRequest("token is required");
				const period = b.period ?? 30;
				const window = b.window ?? 1;
				if (!Number.isInteger(period) || (period as number) < 1 || (period as number) > TOTP_LIMITS.maxPeriod)
					throw badRequest(`period must be an integer from 1 to ${TOTP_LIMITS.maxPeriod}`);
				if (!Number.isInteger(window) || (window as number) < 0 || (window as number) > TOTP_LIMITS.maxWindow)
					throw badRequest(`window must be an integer from 0 to ${TOTP_LIMITS.maxWindow}`);
				// Guessing bounds (docs/security.md, "TOTP checks"): NOK answers per session, per user (across its sessions)
				// and per IP within 15 minutes, counted in the shared cache (so on every gateway); then 429 with Retry-After
				// until 15 minutes pass without a counted failure.
				const limits = totpLimits(t, ctx.meta.ip ?? "unknown");
				await this.totpFailures.assertBelow(limits);
				const hex = decryptEnvelope(this.aes, b.secret);
				if (hex === null) throw badRequest("secret is malformed");
				const ok = checkTotp(hex.trim(), b.token, { period: period as number, window: window as number });
				// Counted atomically before answering: concurrent guesses cannot get more NOK answers than a limit between them.
				if (!ok) await this.totpFailures.count(limits);
				return { result: ok ? "OK" : "NOK" };
			},
		},
		can: {
			async handler(this: AuthThis, ctx: Ctx) {
				return this.can(ctx);
			},
		},
		/** GET /auth/login-blocks: the failed-login blocks in force that the caller may lift (docs/security.md). */
		loginBlocks: {
			async handler(this: AuthThis, ctx: Ctx) {
				const tenant = await blockAuthority(ctx);
				return this.loginLimits.list(tenant, blockFilter(ctx.params.query));
			},
		},
		/** DELETE /auth/login-blocks/:id: lifts one; another tenant's, or none, answers 404. */
		loginUnblock: {
			async handler(this: AuthThis, ctx: Ctx) {
				const tenant = await blockAuthority(ctx);
				const id = blockId(ctx.params.params?.id);
				if (!(await this.loginLimits.lift(id, tenant))) throw notFound(`login block ${id} not found`);
				return { result: "OK" };
			},
		},
		/** Every block in force (the operators' console, runtime/repl.ts: the console is the operator's). Internal. */
		"loginBlocks.all": {
			visibility: "public",
			async handler(this: AuthThis, ctx: Context<Record<string, unknown>>) {
				return this.loginLimits.list(undefined, blockFilter(ctx.params));
			},
		},
		/** Lifts any block (the operators' console). Internal. */
		"loginBlocks.lift": {
			visibility: "public",
			async handler(this: AuthThis, ctx: Context<{ id: unknown }>) {
				const id = blockId(ctx.params.id);
				if (!(await this.loginLimits.lift(id))) throw notFound(`login block ${id} not found`);
				return { result: "OK" };
			},
		},
		/**
		 * What revoking an APT needs (its session, the hash its revocation broadcast names) and whether it is live: its
		 * change events cannot carry them (internal fields). Null once destroyed. Internal (the watcher).
		 */
		"apts.revocation": {
			visibility: "public",
			params: { id: "string" },
			async handler(this: AuthThis, ctx: Context<{ id: string }>) {
				const doc: StoredDoc | null = await this.collectionStore("apts").findOne({ id: ctx.params.id });
				return doc ? { session: doc.session as string, hash: doc.token as string, live: doc.deleted_at === null } : null;
			},
		},
		/** Cache-miss path of APT authentication: the stored (hashed) APT, re-cached. */
		"apts.resolve": {
			visibility: "public",
			async handler(this: AuthThis, ctx: Context<{ suffix: string }>) {
				const suffix = ctx.params.suffix;
				const doc: StoredDoc | null = await this.collectionStore("apts").findOne({ token: sha256Hex(suffix), deleted_at: null });
				if (!doc || (doc.expires_at as number) <= Date.now()) return null;
				const rec = aptRecord(doc);
				await cacheApt(this, suffix, rec);
				return rec;
			},
		},
		/** Every live grant plus the RBAC expansion (roles of a domain only from the client that registers it). */
		"grants.snapshot": {
			visibility: "public",
			async handler(this: AuthThis, ctx: Context) {
				const docs: StoredDoc[] = await this.collectionStore("grants").find({ query: { deleted_at: null } });
				const grants: Grant[] = docs.map((d) => ({ ...pickGrant(d), id: d.id }));
				const rbac = (await ctx.call("context.configs.rbac")) as Array<{ eid: string; value: unknown }>;
				for (const r of rbac) {
					const client = (await ctx.call("domain.clients.authenticate", { id: r.eid })) as ClientInfo | null;
					if (!client || !Array.isArray(r.value)) continue;
					grants.push(...expandRbac(r.value.filter((e) => isPlainObject(e) && client.domains.includes(e.domain as string))));
				}
				return { grants };
			},
		},
	},

	methods: {
		/** POST /auth/can (spec: Authorization). */
		async can(this: AuthThis, ctx: Ctx) {
			const t = requireToken(ctx);
			const b = ctx.params.body;
			if (!isPlainObject(b)) throw badRequest("body must be a JSON object");
			const allowed = ["action", "object", "fields", "filter", "subjects", "strict", "tz", "ip"];
			for (const k of Object.keys(b)) if (!allowed.includes(k)) throw badRequest(`${k} is not a field of a can request`);
			if (typeof b.action !== "string" || !b.action) throw badRequest("action is required");
			if (typeof b.object !== "string" || !b.object) throw badRequest("object is required");
			if (!/^[a-z][a-z0-9-]*:([a-z][a-z0-9-]*|\*)$/.test(b.object)) throw badRequest("object must be service:collection");
			if (b.fields !== undefined && (!Array.isArray(b.fields) || b.fields.some((f) => typeof f !== "string"))) throw badRequest("fields must be an array of strings");
			if (b.subjects !== undefined && (!Array.isArray(b.subjects) || b.subjects.some((f) => typeof f !== "string"))) throw badRequest("subjects must be an array of strings");
			if (b.filter !== undefined && !isPlainObject(b.filter)) throw badRequest("filter must be an object");
			if (b.strict !== undefined && b.strict !== "obj") throw badRequest("strict must be obj");
			if (b.tz !== undefined && typeof b.tz !== "string") throw badRequest("tz must be a string");
			if (b.ip !== undefined && typeof b.ip !== "string") throw badRequest("ip must be a string");
			const mine = subjectsOf(t);
			let subjects = mine;
			// The node's grant index (reloaded on every authority change), as the authority middleware uses it.
			const index = await grantCache.get(ctx);
			if (b.subjects) {
				// Asking for other subjects reveals their grants: only a grants reader may do it, by scope AND by a read
				// grant on auth:grants for the token's own subjects.
				const foreign = (b.subjects as string[]).some((s) => !mine.includes(s));
				const reader = () =>
					hasParsedScope(parseScopes(t.scope), "read:auth:grants") &&
					index.decide({ subjects: mine, action: "read", object: "auth:grants", ip: ctx.meta.ip, tz: t.tz, token: t }).granted;
				if (foreign && !reader()) throw forbidden("subjects outside the token need a read grant on auth:grants");
				// A grant belongs to its subject's domain (docs/security.md, "Tenants"): a reader asks only about subjects of its
				// client's domains, as it grants only them; the operator about every registered domain.
				if (foreign) {
					const { domains } = await callerDomains(ctx);
					const own = new Set(domains.map((d) => d.toLowerCase()));
					const outside = (b.subjects as string[]).find((s) => !mine.includes(s) && !own.has(subjectDomain(s)));
					if (outside !== undefined) throw forbidden(`subjects: ${outside} is not a subject of this tenant`);
				}
				subjects = b.subjects as string[];
			}
			const d = index.decide({
				subjects,
				action: b.action,
				object: b.object,
				strictObj: b.strict === "obj",
				ip: (b.ip as string) ?? ctx.meta.ip,
				tz: (b.tz as string) ?? t.tz,
				token: t,
			});
			const data: Record<string, unknown> = { granted: d.granted };
			const headers = ctx.meta.headers ?? {};
			if (headers["x-can-with-policies"] !== undefined) data.policies = d.policies.map(policyOf);
			if (headers["x-can-with-id-policies"] !== undefined) {
				const idForms = new Set([t.uid, t.aid, t.cid].filter(Boolean).map((x) => `${x}@${t.domain}`));
				data.policies = [
					...((data.policies as unknown[]) ?? []),
					...index
						.forSubjects(subjects)
						.filter((g) => idForms.has(g.subject) && !d.policies.includes(g))
						.map(policyOf),
				];
			}
			if (d.granted && Array.isArray(b.fields) && d.fields !== null) {
				const denied = (b.fields as string[]).filter((f) => f !== "id" && !d.fields!.some((a) => a === f || f.startsWith(`${a}.`)));
				if (denied.length) {
					data.granted = false;
					data.denied_fields = denied;
					data.allowed_fields = (b.fields as string[]).filter((f) => !denied.includes(f));
				}
			}
			return { data };
		},

		/**
		 * docs/contracts.md "Start-up and the first credentials": once, on an empty store, by exactly one of the auth
		 * replicas sharing it (runtime/seed-once.ts). Only the node that seeds knows the generated values and writes them.
		 */
		async seedRoot(this: AuthThis) {
			const file = path.join(this.cfg.dataDir, "bootstrap.json");
			if (readJson<Record<string, string>>(file)) return;
			const claims = createStore(this.cfg, "_seed");
			await claims.connect();
			try {
				// Grants exist only after a seed (every other grant needs the root to be written): a store seeded by a
				// version without claims is not seeded again.
				const seeded = async () => (await this.collectionStore("grants").count({})) > 0;
				const r = await runOnce(claims, "root", { holder: this.broker.nodeID }, seeded, (h: Holding) => this.seedRootNow(file, h));
				if (!r.ran)
					this.logger.info(
						`Platform already seeded by ${r.by}: the root credentials are in that node's DATA_DIR/bootstrap.json (or the PLATFORM_ROOT_* settings); this node writes none.`,
					);
			} finally {
				await claims.disconnect();
			}
		},

		async seedRootNow(this: AuthThis, file: string, h: Holding) {
			const cfg = this.cfg;
			const values = {
				client_id: cfg.rootClientId ?? objectId(),
				client_secret: cfg.rootClientSecret ?? randomToken(24),
				domain: cfg.rootDomain,
				user_id: objectId(),
				username: cfg.rootUsername,
				password: cfg.rootPassword ?? randomToken(18),
			};
			if (!/^[0-9a-f]{24}$/.test(values.client_id)) throw new Error("PLATFORM_ROOT_CLIENT_ID must be a 24-hex id");
			// A fixed PLATFORM_ROOT_CLIENT_ID is reused (its seed is idempotent); a generated id and the user id are not.
			const left = [
				["client", h.previous?.client_id !== values.client_id && h.previous?.client_id],
				["user", h.previous?.user_id],
			].filter(([, id]) => id);
			if (h.previous)
				this.logger.warn(
					`Took over the root seed of ${String(h.previous.holder)}, which stopped mid-seed` +
						(left.length ? `: remove the root ${left.map(([k, id]) => `${k} ${String(id)}`).join(" and ")} if it wrote them (no grants, secret unknown).` : "."),
				);
			// Ids only (never the secrets): what a takeover would need to find a half-done seed.
			await h.note({ client_id: values.client_id, user_id: values.user_id });
			const ctx = platformContext(this);
			await this.broker.call("domain.clients.seedRoot", { id: values.client_id, secret: values.client_secret, domain: values.domain, uid: values.user_id });
			await this.broker.call("identity.users.seedRoot", { id: values.user_id, username: values.username, password: values.password, cid: values.client_id });
			// The root user may do everything, through the ordinary grant check: manage every service, every special action.
			const subject = `${values.user_id}@${values.domain}`;
			const specs: Array<{ action: string; object: string }> = DOMAINS.map((d) => ({ action: "manage", object: `${d.name}:*` }));
			for (const d of DOMAINS) for (const c of d.collections) for (const s of c.specials ?? []) specs.push({ action: s.action, object: `${d.name}:${c.name}` });
			const seen = new Set<string>();
			const docs = specs
				.filter((s) => !seen.has(`${s.action} ${s.object}`) && seen.add(`${s.action} ${s.object}`))
				.map((s) => platformDoc({ subject, ...s }, { owner: values.user_id, cid: values.client_id }));
			await this.collectionStore("grants").insertMany(docs);
			await this.recordChanges(
				ctx,
				"grants",
				docs.map((after: StoredDoc) => ({ op: "c" as const, before: null, after })),
			);
			writePrivateJson(file, values);
			this.broker.broadcast(AUTHORITY_CHANGED, {});
			const generated = (k: string, envName: string) => (process.env[envName] ? "(from environment)" : (values as Record<string, string>)[k]);
			// Printed once, on the first start only; afterwards read DATA_DIR/bootstrap.json. With LOG_FORMAT=json, as one
			// JSON line like every other (a shipper reading the output must not meet a block of text).
			const shown = {
				client_id: values.client_id,
				client_secret: generated("client_secret", "PLATFORM_ROOT_CLIENT_SECRET"),
				domain: values.domain,
				username: values.username,
				password: generated("password", "PLATFORM_ROOT_PASSWORD"),
			};
			process.stdout.write(
				configOf(this.broker).logFormat === "json"
					? `${JSON.stringify({ ts: Date.now(), level: "info", msg: `Platform seeded. Root credentials (also in ${file}, mode 0600)`, mod: "auth", ...shown })}\n`
					: `\nPlatform seeded. Root credentials (also in ${file}, mode 0600):\n` +
							`  client_id:     ${shown.client_id}\n  client_secret: ${shown.client_secret}\n` +
							`  domain:        ${shown.domain}\n  username:      ${shown.username}\n  password:      ${shown.password}\n\n`,
			);
		},
	},
};

/** The counters of failed TOTP checks a check is held to, in the order their 429 is told. */
function totpLimits(t: TokenClaims, ip: string): FailureLimit[] {
	return [
		{ key: `auth:totp-fail:${t.session}`, limit: TOTP_FAIL_LIMIT, message: "too many failed TOTP checks for this session" },
		{ key: `auth:totp-fail:user:${t.uid ?? t.aid ?? t.cid}`, limit: TOTP_USER_FAIL_LIMIT, message: "too many failed TOTP checks for this user" },
		{ key: `auth:totp-fail:ip:${ip}`, limit: TOTP_IP_FAIL_LIMIT, message: "too many failed TOTP checks from this IP" },
	];
}

/**
 * Who sees and lifts failed-login blocks: a token holding scope `manage:identity:users` and a `manage` grant on
 * `identity:users` (who administers users). The operator (a root-client token) sees every tenant's blocks; anyone
 * else only those counted on its own client. Returns the tenant the caller is held to (undefined: all).
 */
async function blockAuthority(ctx: Ctx): Promise<string | undefined> {
	const t = requireToken(ctx);
	checkScope(t, "manage", "identity", "users");
	checkGrant(await grantCache.get(ctx), t, "manage", "identity:users", ctx.meta.ip);
	return (await callerClient(ctx))?.operator ? undefined : t.cid;
}

const BLOCK_FILTERS = ["client", "user", "ip"] as const;

/** The listing's optional filters (`client`, `user`, `ip`: exact values); anything else answers 400. */
function blockFilter(query: unknown): BlockFilter {
	const q = isPlainObject(query) ? query : {};
	for (const k of Object.keys(q))
		if (!(BLOCK_FILTERS as readonly string[]).includes(k)) throw badRequest(`${k.slice(0, 64)} is not a filter of login blocks (${BLOCK_FILTERS.join(", ")})`);
	const out: BlockFilter = {};
	for (const k of BLOCK_FILTERS) {
		const v = q[k];
		if (v === undefined) continue;
		if (typeof v !== "string" || !v || v.length > 100) throw badRequest(`${k} must be a string of 1 to 100 characters`);
		out[k] = v;
	}
	return out;
}

/** A block id as the listing gives it; 400 for anything else. */
function blockId(v: unknown): string {
	if (typeof v !== "string" || !parseBlockId(v)) throw badRequest("id is not a login block id: take one from GET /auth/login-blocks");
	return v;
}

/** The domain of a grant subject (`<local>@<domain>`, `@role@<domain>`), lower-cased; "" without one. */
function subjectDomain(subject: string): string {
	const at = subject.lastIndexOf("@");
	return at > 0 ? subject.slice(at + 1).toLowerCase() : "";
}

function requireToken(ctx: Ctx): TokenClaims {
	const t = ctx.meta.token;
	if (!t) throw new ApiError(502, "authorization layers were not applied");
	return t;
}

function pickGrant(d: Record<string, unknown>): Grant {
	const g: Grant = { subject: d.subject as string, action: d.action as string, object: d.object as string };
	for (const k of ["field", "filter", "location", "time"] as const) if (d[k] !== undefined && d[k] !== null) Object.assign(g, { [k]: d[k] });
	return g;
}

function policyOf(g: Grant) {
	return { subject: g.subject, action: g.action, object: g.object, field: g.field ?? null, filter: g.filter ?? null, ...(g.location ? { location: g.location } : {}) };
}

export default asSchema(AuthService);
