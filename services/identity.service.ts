/**
 * identity: users, profiles, sessions. Passwords are hashed on write and never leave; login verification happens
 * here so the hash never crosses the transporter. Sessions are opened, rotated and closed by the auth service.
 */
import type { ServiceSchema } from "moleculer";
import { identity } from "../catalog/domains/identity";
import { collectionMixin, platformDoc, type Ctx } from "../mixins/collection.mixin";
import type { StoredDoc } from "../mixins/stores";
import { hashSecret, verifySecret } from "../lib/crypto";
import { conflict } from "../lib/errors";

export const USER_CREATED = "identity.user.created";
const LOGIN_FIELDS = ["username", "email", "phone"] as const;

async function assertUniqueLogin(svc: any, doc: Record<string, unknown>, selfId?: string) {
	for (const f of LOGIN_FIELDS) {
		const v = doc[f];
		if (typeof v !== "string") continue;
		const other = await svc.collectionStore("users").findOne({ [f]: v, deleted_at: null });
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
					await assertUniqueLogin(svc, doc);
					doc.status ??= "ACTIVE";
					doc.subjects ??= [];
					if (typeof doc.password === "string") doc.password = await hashSecret(doc.password);
				},
				async beforePatch(ctx: Ctx, set: Record<string, unknown>, before: StoredDoc | null) {
					await assertUniqueLogin(ctx.service as any, set, before?._id);
					if (typeof set.password === "string") set.password = await hashSecret(set.password);
				},
				async afterWrite(ctx: Ctx, op, before, after) {
					if (op === "c" && after) await ctx.emit(USER_CREATED, { id: after._id, owner: after.owner, clients: after.clients });
				},
			},
		}),
	],
	actions: {
		/** Password login: the user for username, email or phone when the password matches; else null. */
		"users.verifyLogin": {
			visibility: "public",
			async handler(this: any, ctx: Ctx & { params: { login: string; password: string } }) {
				const { login, password } = ctx.params as unknown as { login: string; password: string };
				if (typeof login !== "string" || typeof password !== "string") return null;
				const store = this.collectionStore("users");
				let user: StoredDoc | null = null;
				for (const f of LOGIN_FIELDS) if (!user) user = await store.findOne({ [f]: login, deleted_at: null });
				// Hash anyway when unknown, so timing does not tell which logins exist.
				const ok = await verifySecret(password, (user?.password as string) ?? "$2b$10$invalidinvalidinvalidinvalidinvalidinvalidinvalidinvali");
				return user && ok && user.status !== "INACTIVE" ? publicUser(user) : null;
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
