/**
 * domain: OAuth apps and clients. A client secret is generated when not given, returned once in the create
 * response, stored hashed, and checked here so the hash never leaves.
 */
import { AUTHORITY_CHANGED } from "../lib/contracts";
import type { Context, ServiceSchema } from "moleculer";
import { domain, GRANT_TYPES } from "../catalog/domains/domain";
import { collectionMixin, platformDoc, type Ctx, type EngineService } from "../engine/collection.mixin";
import { asSchema } from "../lib/service";
import type { RequestMeta } from "../lib/types";
import type { StoredDoc } from "../stores";
import { randomToken } from "../lib/crypto";
import { hashSecret, verifySecret } from "../runtime/password-hash";
import { rehashIfWeak } from "../runtime/rehash";
import { badRequest, conflict, forbidden } from "../lib/errors";
import { scopeSatisfies } from "../lib/scopes";

/** Domains already claimed earlier in the same (bulk) request: a bulk create cannot give one domain to two clients. */
const claimedInRequest = new WeakMap<object, Set<string>>();

/**
 * A domain name belongs to one client only (docs/contracts.md "Tenants"): 409 when another live client holds one of
 * `domains`. Names are compared (and stored) lowercase.
 */
async function assertDomainsFree(ctx: Ctx, domains: unknown, selfId?: string): Promise<string[] | undefined> {
	if (!Array.isArray(domains)) return undefined;
	const names = [...new Set(domains.map((d) => String(d).trim().toLowerCase()))];
	const claimed = claimedInRequest.get(ctx) ?? new Set<string>();
	claimedInRequest.set(ctx, claimed);
	const store = (ctx.service as EngineService).collectionStore("clients");
	for (const d of names) {
		const other = await store.findOne({ domains: d, deleted_at: null, ...(selfId ? { id: { $ne: selfId } } : {}) });
		if (other || claimed.has(d)) throw conflict(`domain ${d} is already registered`);
	}
	for (const d of names) claimed.add(d);
	return names;
}

/** A client gets at most the scopes of the token that creates or changes it (403 naming the first one beyond). */
function assertScopesHeld(ctx: Ctx, scopes: unknown): void {
	if (!Array.isArray(scopes)) return;
	const held = (ctx.meta.token?.scope ?? "").split(" ").filter(Boolean);
	for (const s of scopes) if (!held.some((h) => scopeSatisfies(h, String(s)))) throw forbidden(`scope ${s} is not held by the caller`);
}

/** What the auth service needs of a client to issue tokens. */
export interface ClientInfo {
	id: string;
	name: string;
	scopes: string[];
	domains: string[];
	grant_types: string[];
	coworkers: string[];
	access_token_ttl?: number;
	refresh_token_ttl?: number;
	status: string;
	/** The seeded root client: the operator's tenant, which may manage every tenant (docs/contracts.md, "Tenants"). */
	operator: boolean;
}

function info(c: StoredDoc): ClientInfo {
	return {
		id: c.id,
		name: c.name as string,
		scopes: (c.scopes as string[]) ?? [],
		domains: (c.domains as string[]) ?? [],
		grant_types: (c.grant_types as string[]) ?? [...GRANT_TYPES],
		coworkers: (c.coworkers as string[]) ?? [],
		access_token_ttl: c.access_token_ttl as number | undefined,
		refresh_token_ttl: c.refresh_token_ttl as number | undefined,
		status: (c.status as string) ?? "ACTIVE",
		operator: c.operator === true,
	};
}

type Call<P> = Context<P, RequestMeta>;

const DomainService: ServiceSchema = asSchema<EngineService>({
	name: "domain",
	mixins: [
		collectionMixin(domain, {
			clients: {
				async beforeCreate(ctx: Ctx, doc: StoredDoc) {
					assertScopesHeld(ctx, doc.scopes);
					doc.domains = await assertDomainsFree(ctx, doc.domains);
					const secret = typeof doc.secret === "string" ? doc.secret : randomToken(32);
					doc.secret = await hashSecret(secret);
					doc.grant_types ??= [...GRANT_TYPES];
					doc.scopes ??= [];
					doc.coworkers ??= [];
					doc.status ??= "ACTIVE";
					// The only time the secret is shown.
					return { secret };
				},
				async beforePatch(ctx: Ctx, set: Record<string, unknown>, before: StoredDoc | null) {
					assertScopesHeld(ctx, set.scopes);
					if (Array.isArray(set.domains)) {
						// One set of domains for several clients would give a domain to each of them.
						if (!before && set.domains.length) throw badRequest("domains cannot be set by a bulk patch (a domain belongs to one client)");
						set.domains = await assertDomainsFree(ctx, set.domains, before?.id);
					}
					if (typeof set.secret === "string") set.secret = await hashSecret(set.secret);
				},
				// A client's domains decide which RBAC roles apply: every node reloads its grant index.
				async afterWrite(ctx: Ctx, op, before, after) {
					ctx.broadcast(AUTHORITY_CHANGED, {});
					// Deactivated or deleted: every session (and APT) issued through it ends now.
					if (before && (op === "d" || (op === "u" && after?.status === "INACTIVE"))) await ctx.call("identity.sessions.closeAll", { cid: before.id });
				},
			},
			apps: {
				beforeCreate(ctx: Ctx, doc: StoredDoc) {
					doc.status ??= "ACTIVE";
					doc.scopes ??= [];
				},
			},
		}),
	],
	actions: {
		/** The client, when it exists, is live and (if a secret is given) the secret matches; else null. */
		"clients.authenticate": {
			visibility: "public",
			async handler(this: EngineService, ctx: Call<{ id: unknown; secret?: unknown }>): Promise<ClientInfo | null> {
				const { id, secret } = ctx.params;
				if (typeof id !== "string" || !/^[0-9a-f]{24}$/i.test(id)) return null;
				const c = await this.collectionStore("clients").findOne({ id: id.toLowerCase(), deleted_at: null });
				if (!c || c.status === "INACTIVE") return null;
				if (secret !== undefined) {
					if (!(typeof secret === "string" && (await verifySecret(secret, c.secret as string)))) return null;
					await rehashIfWeak(this.collectionStore("clients"), c.id, "secret", secret, c.secret as string);
				}
				return info(c);
			},
		},
		/** Every domain a client (not deleted) registers: the operator may grant subjects of any of them. */
		"clients.registeredDomains": {
			visibility: "public",
			async handler(this: EngineService): Promise<string[]> {
				const docs = await this.collectionStore("clients").find({ query: { deleted_at: null }, projection: { domains: 1 } });
				return [...new Set(docs.flatMap((c) => (Array.isArray(c.domains) ? (c.domains as string[]) : [])))];
			},
		},
		"apps.lookup": {
			visibility: "public",
			async handler(this: EngineService, ctx: Call<{ id: unknown }>) {
				const { id } = ctx.params;
				if (typeof id !== "string" || !/^[0-9a-f]{24}$/i.test(id)) return null;
				const a = await this.collectionStore("apps").findOne({ id: id.toLowerCase(), deleted_at: null });
				return a && a.status !== "INACTIVE" ? { id: a.id, client: a.client, scopes: (a.scopes as string[]) ?? [] } : null;
			},
		},
		/** First start only: the root client with the given id, secret, scopes and domain. */
		"clients.seedRoot": {
			visibility: "public",
			async handler(this: EngineService, ctx: Call<{ id: string; secret: string; domain: string; uid: string }>) {
				const { id, secret, domain: rootDomain, uid } = ctx.params;
				const store = this.collectionStore("clients");
				if (await store.findOne({ id })) return { created: false };
				const doc = platformDoc(
					{
						name: "root",
						secret: await hashSecret(secret),
						scopes: ["whole"],
						domains: [rootDomain],
						grant_types: [...GRANT_TYPES],
						coworkers: [],
						status: "ACTIVE",
						operator: true,
					},
					{ owner: uid, cid: id },
				);
				doc.id = id;
				await store.insert(doc);
				await this.recordChanges(ctx as Ctx, "clients", [{ op: "c", before: null, after: doc }]);
				return { created: true };
			},
		},
	},
});

export default DomainService;

/** The caller's client (tenant) as the auth service sees it; null when the token has none or it is no longer live. */
export function callerClient(ctx: { call: (action: string, params: unknown) => Promise<unknown>; meta: { token?: { cid?: string } } }): Promise<ClientInfo | null> {
	const cid = ctx.meta.token?.cid;
	if (!cid) return Promise.resolve(null);
	return ctx.call("domain.clients.authenticate", { id: cid }) as Promise<ClientInfo | null>;
}
