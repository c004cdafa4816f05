/**
 * identity: users, profiles, sessions. Passwords are hashed on write and never leave; login verification happens
 * here so the hash never crosses the transporter. Sessions are opened, rotated and closed by the auth service.
 */
import type { Context, ServiceSchema } from "moleculer";
import { identity } from "../catalog/domains/identity";
import { collectionMixin, platformDoc, type Ctx, type EngineService } from "../engine/collection.mixin";
import type { StoredDoc } from "../stores";
import { randomToken } from "../lib/crypto";
import { hashSecret, verifySecret } from "../runtime/password-hash";
import { rehashIfWeak } from "../runtime/rehash";
import { badRequest, conflict } from "../lib/errors";
import { configOf } from "../runtime/config";
import { sharedKeyValue, type KeyValue } from "../runtime/kv";
import { announceRevocation, blacklistSession, USER_CHANGED, userStateChanged } from "../authority/authenticate";
import { passwordProblem, usernameProblem, userSubjectProblem } from "../lib/grant-validation";
import type { RequestMeta } from "../lib/types";
import { asSchema } from "../lib/service";

/** The identity service's `this` (lib/service.ts): the engine's methods and what `created` sets. */
type Identity = EngineService & {
	kv: KeyValue;
	/** A hash checked for logins that match no user. */
	dummyHash: Promise<string>;
};
type Call<P> = Context<P, RequestMeta>;

export const USER_CREATED = "identity.user.created";
const LOGIN_FIELDS = ["username", "email", "phone"] as const;
const HEX24 = /^[0-9a-f]{24}$/i;

/** The tenant a user belongs to: the client that created it, the first entry of its `clients`. */
const TENANT = "clients.0";

export function normalEmail(v: string): string {
	return v.trim().toLowerCase();
}

/** A phone number as stored and matched: its digits, with the leading `+`. */
export function normalPhone(v: string): string {
	return `+${v.replace(/\D/g, "")}`;
}

/**
 * The live user `login` (username, email or phone) names among the users of `tenants`: of the first tenant listed
 * before the others, a username before an email before a phone. Null when none.
 */
async function loginUser(svc: Identity, login: string, tenants: unknown): Promise<StoredDoc | null> {
	const allowed = Array.isArray(tenants) ? tenants.filter((t) => typeof t === "string") : [];
	if (!allowed.length) return null;
	const found = await svc.collectionStore("users").find({
		query: { [TENANT]: { $in: allowed }, deleted_at: null, $or: [{ username: login }, { email: normalEmail(login) }, { phone: normalPhone(login) }] },
		limit: 50,
	});
	const rank = (u: StoredDoc) =>
		allowed.indexOf((u.clients as string[])[0]) * 3 +
		LOGIN_FIELDS.findIndex((f) => (f === "username" ? u.username === login : f === "email" ? u.email === normalEmail(login) : u.phone === normalPhone(login)));
	return found.sort((a, b) => rank(a) - rank(b))[0] ?? null;
}

/**
 * Username form, password length, subjects entries (roles, and group names as every document's `groups` takes them:
 * lib/validate.ts), and the stored (normalised) email and phone; 400 naming the field.
 */
function checkUserFields(doc: Record<string, unknown>): void {
	const problems = [
		doc.username !== undefined && doc.username !== null ? usernameProblem(doc.username) : null,
		passwordProblem(doc.password),
		...(Array.isArray(doc.subjects) ? doc.subjects.map((e, i) => userSubjectProblem(e, `subjects[${i}]`)) : []),
	];
	const p = problems.find((x) => x !== null);
	if (p) throw badRequest(p);
	if (typeof doc.email === "string") doc.email = normalEmail(doc.email);
	if (typeof doc.phone === "string") doc.phone = normalPhone(doc.phone);
}

/**
 * Username, email and phone are unique together inside one tenant (docs/contracts.md "Tenants"): no user of the tenant has
 * any of the values in any of the three fields. Per tenant, so a 409 never reveals another tenant's users.
 */
async function assertUniqueLogin(svc: Identity, tenant: unknown, doc: Record<string, unknown>, selfId?: string) {
	for (const f of LOGIN_FIELDS) {
		const v = doc[f];
		if (typeof v !== "string") continue;
		const other = await svc.collectionStore("users").findOne({ [TENANT]: tenant, deleted_at: null, $or: LOGIN_FIELDS.map((g) => ({ [g]: v })) });
		if (other && other.id !== selfId) throw conflict(`${f} already exists`);
	}
}

/** Closing sessions goes in batches of this many (bounded memory, one change event each). */
const CLOSE_BATCH = 200;

/**
 * Closes every live session matching `match` (a user's, `{ uid }`, or a client's, `{ cid }`) durably, then
 * blacklists each in the cache and broadcasts its revocation, so every node refuses its tokens (APTs included:
 * each has a session of its own) at once.
 */
async function closeSessions(svc: Identity, ctx: Ctx, match: { uid?: string; cid?: string }): Promise<number> {
	const store = svc.collectionStore("sessions");
	const t = ctx.meta.token;
	const stamp = { deleted_at: new Date().toISOString(), deleted_by: t?.uid ?? t?.aid ?? t?.cid ?? null, deleted_in: t?.aid ?? t?.cid ?? null };
	let closed = 0;
	for (;;) {
		const batch = await store.find({ query: { ...match, deleted_at: null }, sort: { id: 1 }, limit: CLOSE_BATCH });
		if (!batch.length) break;
		await store.setMany(
			batch.map((b) => b.id),
			stamp,
		);
		await svc.recordChanges(
			ctx,
			"sessions",
			batch.map((before) => ({ op: "d", before, after: null })),
		);
		for (const b of batch) await blacklistSession(svc.kv, b.id);
		await announceRevocation(ctx.broker, { sessions: batch.map((b) => b.id) });
		closed += batch.length;
		if (batch.length < CLOSE_BATCH) break;
	}
	return closed;
}

/** What `identity.sessions.open` is called with (services/auth). */
interface SessionOpen {
	uid?: string;
	aid?: string;
	cid: string;
	domain?: string;
	ip?: string;
	agent?: string;
	expiration: string;
	refresh?: string;
	coworkers?: string[];
}

function publicUser(u: StoredDoc) {
	return { id: u.id, username: u.username, email: u.email, phone: u.phone, subjects: (u.subjects as string[]) ?? [], status: u.status };
}

const IdentityService: ServiceSchema = asSchema<Identity>({
	name: "identity",
	mixins: [
		collectionMixin(identity, {
			users: {
				async beforeCreate(this: void, ctx: Ctx, doc: StoredDoc) {
					const svc = ctx.service as Identity;
					checkUserFields(doc);
					await assertUniqueLogin(svc, (doc.clients as string[])[0], doc);
					doc.status ??= "ACTIVE";
					doc.subjects ??= [];
					if (typeof doc.password === "string") doc.password = await hashSecret(doc.password);
				},
				async beforePatch(ctx: Ctx, set: Record<string, unknown>, before: StoredDoc | null) {
					checkUserFields(set);
					// A bulk patch would give every matched user the same value: unique fields are set one user at a time.
					if (!before) for (const f of LOGIN_FIELDS) if (f in set) throw badRequest(`${f} cannot be set by a bulk patch (it is unique)`);
					if (before) await assertUniqueLogin(ctx.service as Identity, (before.clients as string[] | undefined)?.[0], set, before.id);
					if (typeof set.password === "string") set.password = await hashSecret(set.password);
				},
				async afterWrite(ctx: Ctx, op, before, after) {
					if (op === "c" && after) await ctx.emit(USER_CREATED, { id: after.id, owner: after.owner, clients: after.clients });
					// Deactivated, deleted (soft or destroy) or given a new password: every session and APT of the user ends now.
					const revoke = op === "d" || (op === "u" && !!after && (after.status === "INACTIVE" || after.password !== before?.password));
					if (revoke && before) await closeSessions(ctx.service as Identity, ctx, { uid: before.id });
					// A role or group taken away stops counting in the user's tokens on every node (authority/authenticate.ts).
					if (before && userStateChanged(op, before, after)) ctx.broadcast(USER_CHANGED, { ids: [before.id] });
				},
			},
			sessions: {
				beforeRestore() {
					throw badRequest("a revoked session cannot be restored; log in again");
				},
			},
		}),
	],
	created(this: Identity) {
		const cfg = configOf(this.broker);
		this.kv = sharedKeyValue(cfg.redisUrl, cfg.redisPrefix);
		// A real hash of the stored cost, for logins that match no user: an unknown login costs what a known one does.
		this.dummyHash = hashSecret(randomToken(18));
		this.dummyHash.catch(() => undefined);
	},
	actions: {
		/**
		 * Password login: the user for username, email or phone when the password matches; else null. Only users of
		 * `tenants` (the client used, then the tenants it lists as coworkers, in that order of preference) are searched.
		 */
		"users.verifyLogin": {
			visibility: "public",
			async handler(this: Identity, ctx: Call<{ login: unknown; password: unknown; tenants: unknown }>) {
				const { login, password, tenants } = ctx.params;
				if (typeof login !== "string" || typeof password !== "string") return null;
				const user = await loginUser(this, login, tenants);
				// Hash anyway when unknown, so timing does not tell which logins exist.
				const ok = await verifySecret(password, (user?.password as string) ?? (await this.dummyHash));
				if (!user || !ok || user.status === "INACTIVE") return null;
				await rehashIfWeak(this.collectionStore("users"), user.id, "password", password, user.password as string);
				return publicUser(user);
			},
		},
		/**
		 * The user a password login of `login` through `tenants` would check (any status), without checking a password:
		 * the account its failures are counted on (services/auth/login-limits.ts). Null when none.
		 */
		"users.loginAccount": {
			visibility: "public",
			async handler(this: Identity, ctx: Call<{ login: unknown; tenants: unknown }>) {
				const { login, tenants } = ctx.params;
				if (typeof login !== "string") return null;
				const user = await loginUser(this, login, tenants);
				return user ? { id: user.id } : null;
			},
		},
		/**
		 * Which of `ids` are not live users of `tenants` (plus the tenant of the caller's user `uid`), nor one of those
		 * tenants' clients: the `shares` check of the collection engine, one call a request.
		 */
		"users.outsideTenant": {
			visibility: "public",
			async handler(this: Identity, ctx: Call<{ tenants: unknown; uid?: unknown; ids: unknown }>): Promise<{ outside: string[] }> {
				const { tenants, uid, ids } = ctx.params;
				const store = this.collectionStore("users");
				const allowed = new Set((Array.isArray(tenants) ? tenants : []).filter((t) => typeof t === "string"));
				if (typeof uid === "string") {
					const me = await store.findOne({ id: uid, deleted_at: null });
					const own = (me?.clients as string[] | undefined)?.[0];
					if (own) allowed.add(own);
				}
				const list = Array.isArray(ids) ? ids.map(String) : [];
				const candidates = [...new Set(list.filter((id) => HEX24.test(id)).map((id) => id.toLowerCase()))].filter((id) => !allowed.has(id));
				const inside = new Set<string>(allowed);
				for (let i = 0; i < candidates.length; i += 500) {
					const chunk = candidates.slice(i, i + 500);
					const docs = await store.find({ query: { id: { $in: chunk }, [TENANT]: { $in: [...allowed] }, deleted_at: null }, projection: { id: 1 } });
					for (const d of docs) inside.add(d.id);
				}
				return { outside: list.filter((id) => !inside.has(id.toLowerCase())) };
			},
		},
		"users.byId": {
			visibility: "public",
			async handler(this: Identity, ctx: Call<{ id: unknown }>) {
				const u = await this.collectionStore("users").findOne({ id: String(ctx.params.id), deleted_at: null });
				return u ? publicUser(u) : null;
			},
		},
		/** First start only: the root user, with the given id and password. */
		"users.seedRoot": {
			visibility: "public",
			async handler(this: Identity, ctx: Call<{ id: string; username: string; password: string; cid: string }>) {
				const { id, username, password, cid } = ctx.params;
				const problem = usernameProblem(username);
				if (problem) throw new Error(`PLATFORM_ROOT_USERNAME ${problem.slice("username: ".length)}`);
				const store = this.collectionStore("users");
				if (await store.findOne({ id })) return { created: false };
				const doc = platformDoc({ username, password: await hashSecret(password), subjects: [], status: "ACTIVE" }, { owner: id, cid });
				doc.id = id;
				await store.insert(doc);
				await this.recordChanges(ctx as Ctx, "users", [{ op: "c", before: null, after: doc }]);
				return { created: true };
			},
		},
		"sessions.open": {
			visibility: "public",
			async handler(this: Identity, ctx: Call<SessionOpen>) {
				const { uid, aid, cid, domain, ip, agent, expiration, refresh, coworkers } = ctx.params;
				const doc = platformDoc({ uid, aid, cid, domain, ip, agent, expiration, refresh }, { owner: uid ?? aid ?? cid, cid, aid, coworkers });
				await this.collectionStore("sessions").insert(doc);
				await this.recordChanges(ctx as Ctx, "sessions", [{ op: "c", before: null, after: doc }]);
				return { id: doc.id };
			},
		},
		/** Refresh rotation: swaps the stored refresh id only if it is still the presented one (single use). */
		"sessions.rotate": {
			visibility: "public",
			async handler(this: Identity, ctx: Call<{ id: string; from: string; to: string; expiration: string }>) {
				const { id, from, to, expiration } = ctx.params;
				const store = this.collectionStore("sessions");
				const before = await store.findOne({ id, refresh: from, deleted_at: null });
				if (!before) return { ok: false };
				const after = await store.setOne(id, { refresh: to, expiration, updated_at: new Date().toISOString() });
				if (!after || after.refresh !== to) return { ok: false };
				await this.recordChanges(ctx as Ctx, "sessions", [{ op: "u", before, after }]);
				return { ok: true };
			},
		},
		/**
		 * Whether a session still stands (the durable answer behind the cache's blacklist): open, and its user (if any)
		 * and client still exist and are ACTIVE. Internal: the Authenticator asks it on a cache miss.
		 */
		"sessions.live": {
			visibility: "public",
			async handler(this: Identity, ctx: Call<{ id: unknown }>) {
				const id = ctx.params.id;
				if (typeof id !== "string" || !id) return { live: false };
				const s = await this.collectionStore("sessions").findOne({ id, deleted_at: null });
				if (!s) return { live: false };
				if (typeof s.uid === "string") {
					const u = await this.collectionStore("users").findOne({ id: s.uid, deleted_at: null });
					if (!u || u.status === "INACTIVE") return { live: false };
				}
				if (typeof s.cid === "string" && !(await ctx.call("domain.clients.authenticate", { id: s.cid }))) return { live: false };
				return { live: true };
			},
		},
		/** Closes every live session of a user (`uid`) or issued through a client (`cid`); see closeSessions. */
		"sessions.closeAll": {
			visibility: "public",
			async handler(this: Identity, ctx: Call<{ uid?: unknown; cid?: unknown }>) {
				const { uid, cid } = ctx.params;
				if (typeof uid === "string" && uid) return { closed: await closeSessions(this, ctx as Ctx, { uid }) };
				if (typeof cid === "string" && cid) return { closed: await closeSessions(this, ctx as Ctx, { cid }) };
				return { closed: 0 };
			},
		},
		"sessions.close": {
			visibility: "public",
			async handler(this: Identity, ctx: Call<{ id: unknown }>) {
				const store = this.collectionStore("sessions");
				const before = await store.findOne({ id: String(ctx.params.id), deleted_at: null });
				if (!before) return { closed: false };
				const t: { uid?: string; aid?: string; cid?: string } = ctx.meta.token ?? {};
				const after = await store.setOne(before.id, { deleted_at: new Date().toISOString(), deleted_by: t.uid ?? t.aid ?? t.cid ?? null, deleted_in: t.aid ?? t.cid ?? null });
				await this.recordChanges(ctx as Ctx, "sessions", [{ op: "d", before, after: null }]);
				return { closed: !!after };
			},
		},
	},
});

export default IdentityService;
