/**
 * identity: users, profiles, sessions. Passwords are hashed on write and never leave; login verification happens
 * here so the hash never crosses the transporter. Sessions are opened, rotated and closed by the auth service.
 */
import type { ServiceSchema } from "moleculer";
import { identity } from "../catalog/domains/identity";
import { collectionMixin, platformDoc, type Ctx } from "../mixins/collection.mixin";
import type { StoredDoc } from "../mixins/stores";
import { hashSecret, verifySecret } from "../lib/crypto";
import { badRequest, conflict } from "../lib/errors";
import { usernameProblem, userSubjectProblem } from "../lib/grant-validation";

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

/** Username form, subjects entries, and the stored (normalised) email and phone; 400 naming the field. */
function checkUserFields(doc: Record<string, unknown>): void {
	if (doc.username !== undefined && doc.username !== null) {
		const p = usernameProblem(doc.username);
		if (p) throw badRequest(p);
	}
	if (Array.isArray(doc.subjects))
		doc.subjects.forEach((e, i) => {
			const p = userSubjectProblem(e, `subjects[${i}]`);
			if (p) throw badRequest(p);
		});
	if (typeof doc.email === "string") doc.email = normalEmail(doc.email);
	if (typeof doc.phone === "string") doc.phone = normalPhone(doc.phone);
}

/**
 * Username, email and phone are unique together inside one tenant (CONTRACTS.md "Tenants"): no user of the tenant has
 * any of the values in any of the three fields. Per tenant, so a 409 never reveals another tenant's users.
 */
async function assertUniqueLogin(svc: any, tenant: unknown, doc: Record<string, unknown>, selfId?: string) {
	for (const f of LOGIN_FIELDS) {
		const v = doc[f];
		if (typeof v !== "string") continue;
		const other = await svc.collectionStore("users").findOne({ [TENANT]: tenant, deleted_at: null, $or: LOGIN_FIELDS.map((g) => ({ [g]: v })) });
		if (other && other._id !== selfId) throw conflict(`${f} already exists`);
	}
}

function publicUser(u: StoredDoc) {
	return { id: u._id, username: u.username, email: u.email, phone: u.phone, subjects: (u.subjects as string[]) ?? [], status: u.status };
}

const IdentityService: ServiceSchema = {
	name: "identity",
	mixins: [
		collectionMixin(identity, {
			users: {
				async beforeCreate(this: void, ctx: Ctx, doc: StoredDoc) {
					const svc = (ctx.service as any);
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
					if (before) await assertUniqueLogin(ctx.service as any, (before.clients as string[] | undefined)?.[0], set, before._id);
					if (typeof set.password === "string") set.password = await hashSecret(set.password);
				},
				async afterWrite(ctx: Ctx, op, before, after) {
					if (op === "c" && after) await ctx.emit(USER_CREATED, { id: after._id, owner: after.owner, clients: after.clients });
				},
			},
		}),
	],
	actions: {
		/**
		 * Password login: the user for username, email or phone when the password matches; else null. Only users of
		 * `tenants` (the client used, then the tenants it lists as coworkers, in that order of preference) are searched.
		 */
		"users.verifyLogin": {
			visibility: "public",
			async handler(this: any, ctx: Ctx & { params: { login: string; password: string; tenants: string[] } }) {
				const { login, password, tenants } = ctx.params as unknown as { login: string; password: string; tenants: string[] };
				if (typeof login !== "string" || typeof password !== "string") return null;
				const allowed = Array.isArray(tenants) ? tenants.filter((t) => typeof t === "string") : [];
				let user: StoredDoc | null = null;
				if (allowed.length) {
					const found: StoredDoc[] = await this.collectionStore("users").find({
						query: { [TENANT]: { $in: allowed }, deleted_at: null, $or: [{ username: login }, { email: normalEmail(login) }, { phone: normalPhone(login) }] },
						limit: 50,
					});
					const rank = (u: StoredDoc) => allowed.indexOf((u.clients as string[])[0]) * 3 + LOGIN_FIELDS.findIndex((f) => f === "username" ? u.username === login : f === "email" ? u.email === normalEmail(login) : u.phone === normalPhone(login));
					user = found.sort((a, b) => rank(a) - rank(b))[0] ?? null;
				}
				// Hash anyway when unknown, so timing does not tell which logins exist.
				const ok = await verifySecret(password, (user?.password as string) ?? "$2b$10$invalidinvalidinvalidinvalidinvalidinvalidinvalidinvali");
				return user && ok && user.status !== "INACTIVE" ? publicUser(user) : null;
			},
		},
		/**
		 * Which of `ids` are not live users of `tenants` (plus the tenant of the caller's user `uid`), nor one of those
		 * tenants' clients: the `shares` check of the collection engine, one call a request.
		 */
		"users.outsideTenant": {
			visibility: "public",
			async handler(this: any, ctx: any): Promise<{ outside: string[] }> {
				const { tenants, uid, ids } = ctx.params as { tenants: string[]; uid?: string; ids: string[] };
				const store = this.collectionStore("users");
				const allowed = new Set((Array.isArray(tenants) ? tenants : []).filter((t) => typeof t === "string"));
				if (typeof uid === "string") {
					const me: StoredDoc | null = await store.findOne({ id: uid, deleted_at: null });
					const own = (me?.clients as string[] | undefined)?.[0];
					if (own) allowed.add(own);
				}
				const list = Array.isArray(ids) ? ids.map(String) : [];
				const candidates = [...new Set(list.filter((id) => HEX24.test(id)).map((id) => id.toLowerCase()))].filter((id) => !allowed.has(id));
				const inside = new Set<string>(allowed);
				for (let i = 0; i < candidates.length; i += 500) {
					const chunk = candidates.slice(i, i + 500);
					const docs: StoredDoc[] = await store.find({ query: { id: { $in: chunk }, [TENANT]: { $in: [...allowed] }, deleted_at: null }, projection: { _id: 1 } });
					for (const d of docs) inside.add(d._id);
				}
				return { outside: list.filter((id) => !inside.has(id.toLowerCase())) };
			},
		},
		"users.byId": {
			visibility: "public",
			async handler(this: any, ctx: any) {
				const u = await this.collectionStore("users").findOne({ id: String(ctx.params.id), deleted_at: null });
				return u ? publicUser(u) : null;
			},
		},
		/** First start only: the root user, with the given id and password. */
		"users.seedRoot": {
			visibility: "public",
			async handler(this: any, ctx: any) {
				const { id, username, password, cid } = ctx.params;
				const problem = usernameProblem(username);
				if (problem) throw new Error(`PLATFORM_ROOT_USERNAME ${problem.slice("username: ".length)}`);
				const store = this.collectionStore("users");
				if (await store.findOne({ id })) return { created: false };
				const doc = platformDoc({ username, password: await hashSecret(password), subjects: [], status: "ACTIVE" }, { owner: id, cid });
				doc._id = id;
				await store.insert(doc);
				await this.recordChanges(ctx, "users", [{ op: "c", before: null, after: doc }]);
				return { created: true };
			},
		},
		"sessions.open": {
			visibility: "public",
			async handler(this: any, ctx: any) {
				const { uid, aid, cid, domain, ip, agent, expiration, refresh, coworkers } = ctx.params;
				const doc = platformDoc({ uid, aid, cid, domain, ip, agent, expiration, refresh }, { owner: uid ?? aid ?? cid, cid, aid, coworkers });
				await this.collectionStore("sessions").insert(doc);
				await this.recordChanges(ctx, "sessions", [{ op: "c", before: null, after: doc }]);
				return { id: doc._id };
			},
		},
		/** Refresh rotation: swaps the stored refresh id only if it is still the presented one (single use). */
		"sessions.rotate": {
			visibility: "public",
			async handler(this: any, ctx: any) {
				const { id, from, to, expiration } = ctx.params;
				const store = this.collectionStore("sessions");
				const before = await store.findOne({ id, refresh: from, deleted_at: null });
				if (!before) return { ok: false };
				const after = await store.setOne(id, { refresh: to, expiration, updated_at: new Date().toISOString() });
				if (!after || after.refresh !== to) return { ok: false };
				await this.recordChanges(ctx, "sessions", [{ op: "u", before, after }]);
				return { ok: true };
			},
		},
		"sessions.close": {
			visibility: "public",
			async handler(this: any, ctx: any) {
				const store = this.collectionStore("sessions");
				const before = await store.findOne({ id: String(ctx.params.id), deleted_at: null });
				if (!before) return { closed: false };
				const t = ctx.meta.token ?? {};
				const after = await store.setOne(before._id, { deleted_at: new Date().toISOString(), deleted_by: t.uid ?? t.aid ?? t.cid ?? null, deleted_in: t.aid ?? t.cid ?? null });
				await this.recordChanges(ctx, "sessions", [{ op: "d", before, after: null }]);
				return { closed: !!after };
			},
		},
	},
};

export default IdentityService;
