/**
 * context: configuration entries and settings. RBAC entries feed the grant engine: any change to one is
 * broadcast so every node reloads its grant index. CQRS entries (webhook registrations) are read by the dispatcher
 * through `configs.cqrs`; a change to one is broadcast (CQRS_CHANGED) so every dispatcher drops its cached copy.
 */
import { AUTHORITY_CHANGED, CQRS_CHANGED, type CqrsConfig } from "../lib/contracts";
import type { Context, ServiceSchema } from "moleculer";
import { context } from "../catalog/domains/context";
import { collectionMixin, type Ctx, type EngineService } from "../engine/collection.mixin";
import { asSchema } from "../lib/service";
import type { RequestMeta } from "../lib/types";
import type { StoredDoc } from "../stores";
import { Aes, CQRS_CREDENTIALS, SMS_CREDENTIALS } from "../lib/crypto";
import { configOf, loadKeys } from "../runtime/config";
import { badRequest, forbidden } from "../lib/errors";
import { callerClient, type ClientInfo } from "./domain.service";
import { redactSmsValue, sealSmsValue } from "../lib/touch";
import { validateRbac } from "../lib/grant-validation";
import { deliveries, redeliver } from "./context/deliveries";

const isRbac = (d: StoredDoc | null) => d?.key === "RBAC";
const isCqrs = (d: StoredDoc | null) => d?.key === "CQRS";

const isObject = (v: unknown): v is Record<string, unknown> => !!v && typeof v === "object" && !Array.isArray(v);

/** Webhook credentials of a CQRS value, kept AES-encrypted at rest (`aes:<wire form>`). */
const CREDENTIALS = ["secret", "authorization"] as const;
const SEALED = "aes:";

/**
 * Encrypts the credentials of a CQRS value before it is stored, with the key of their own purpose (never the
 * x-api-key one). Every string a caller gives is plaintext, also one that starts with `aes:`: a body never supplies a
 * sealed value. On a patch, a credential the new value omits is kept from the stored (sealed) one (re-enabling a
 * webhook must not drop its secret); `null` removes it.
 */
export function sealCredentials(aes: Aes, value: Record<string, unknown>, previous?: unknown): Record<string, unknown> {
	const out = { ...value };
	for (const k of CREDENTIALS) {
		const v = out[k];
		if (v === undefined && isObject(previous) && typeof previous[k] === "string") out[k] = previous[k];
		else if (v === null) delete out[k];
		else if (typeof v === "string") out[k] = SEALED + aes.encrypt(v);
		else if (v !== undefined) throw badRequest(`value.${k} must be a string`);
	}
	return out;
}

/** Whether a stored config holds webhook credentials: a CQRS config with a `secret` or `authorization`. */
function holdsCredentials(d: StoredDoc | Record<string, unknown>): boolean {
	const v = d.value;
	if (!isObject(v)) return false;
	if (d.key === "SMS") return Object.values(v).some((e) => isObject(e) && typeof e.key === "string");
	return d.key === "CQRS" && CREDENTIALS.some((k) => typeof v[k] === "string");
}

const NOT_CALLERS = "eid must be the caller's client";

/**
 * The client a config's `eid` names, checked against the caller (docs/contracts.md "Tenants"): the caller's own client; any
 * live client for a token of the root client (the operator manages every tenant), 400 when it names none; 403 for
 * another client's id otherwise (whether it exists or not).
 */
async function eidClient(ctx: Ctx, eid: string): Promise<ClientInfo> {
	const caller = await callerClient(ctx);
	if (!caller) throw forbidden(NOT_CALLERS);
	if (eid === caller.id) return caller;
	if (!caller.operator) throw forbidden(NOT_CALLERS);
	const target = (await ctx.call("domain.clients.authenticate", { id: eid })) as ClientInfo | null;
	if (!target) throw badRequest(`eid ${eid} is not a client`);
	return target;
}

/** A 24-hex `eid` in lower case, as client ids are stored (the dispatcher looks configs up by equality). */
const normalEid = (eid: string) => (/^[0-9a-fA-F]{24}$/.test(eid) ? eid.toLowerCase() : eid);

/**
 * A CQRS value (spec: `{ webhook: <url> }`, optionally `authorization`): an object whose `webhook` is an http(s) URL,
 * which the dispatcher can POST to (its address is checked again at each delivery).
 */
function validateCqrs(value: unknown): void {
	const shape = "{ webhook: <http(s) URL>, secret?, authorization? }";
	if (!isObject(value)) throw badRequest(`value of a CQRS config must be an object ${shape}`);
	const url = value.webhook;
	let ok = false;
	try {
		ok = typeof url === "string" && url.length <= 2048 && ["http:", "https:"].includes(new URL(url).protocol);
	} catch {
		ok = false;
	}
	if (!ok) throw badRequest(`value.webhook must be an http(s) URL (a CQRS value is ${shape})`);
}

/** The checks of a config's value by key: a CQRS webhook registration, an RBAC role table. */
function validateValue(key: unknown, value: unknown): void {
	if (key === "CQRS") validateCqrs(value);
	else if (key === "RBAC") validateRbac(value);
}

/** Every RBAC entry's `domain` must be a domain of the `eid` client (the grant snapshot drops any other). */
function checkRbacDomains(value: unknown, client: ClientInfo): void {
	if (!Array.isArray(value)) return;
	value.forEach((e, i) => {
		const d = isObject(e) ? e.domain : undefined;
		if (typeof d === "string" && !client.domains.includes(d)) throw badRequest(`value[${i}].domain: '${d}' is not a domain of client ${client.id}`);
	});
}

function openCredentials(aes: Aes, value: Record<string, unknown>): Record<string, unknown> {
	const out = { ...value };
	for (const k of CREDENTIALS) {
		const v = out[k];
		if (typeof v === "string" && v.startsWith(SEALED)) out[k] = aes.decrypt(v.slice(SEALED.length)) ?? undefined;
	}
	return out;
}

/** The dispatcher's view of a stored CQRS config; with `aes`, the credentials in clear (never log them). */
export function cqrsOf(d: StoredDoc, aes?: Aes): CqrsConfig {
	const raw = isObject(d.value) ? d.value : {};
	const value = (aes ? openCredentials(aes, raw) : raw) as CqrsConfig["value"];
	const since = Date.parse(String(d.created_at ?? ""));
	return { id: d.id, eid: String(d.eid), value, active: value.active !== false, since: Number.isNaN(since) ? 0 : since };
}

/** SMS provider credentials (touch): each provider's `key` sealed at rest (lib/touch.ts), never returned or in an event. */
function sealSms(ctx: Ctx, key: unknown, target: Record<string, unknown>, previous?: unknown): void {
	if (key === "SMS" && isObject(target.value)) target.value = sealSmsValue((ctx.service as ContextThis).smsAes, target.value, previous);
}

/** The context service's `this` (lib/service.ts): the engine's methods and its credentials' keys. */
type ContextThis = EngineService & {
	/** Seals CQRS webhook credentials. */
	aes: Aes;
	/** Seals SMS provider keys. */
	smsAes: Aes;
};

const ContextService: ServiceSchema = asSchema<ContextThis>({
	name: "context",
	created(this: ContextThis) {
		// Webhook credentials have a key of their own: a value sealed here never opens as an x-api-key, TOTP secret or
		// APT cache record, nor the other way round.
		const secret = loadKeys(configOf(this.broker)).aesSecret;
		this.aes = Aes.forPurpose(secret, CQRS_CREDENTIALS);
		this.smsAes = Aes.forPurpose(secret, SMS_CREDENTIALS);
	},
	mixins: [
		collectionMixin(context, {
			configs: {
				// A CQRS value's `secret` and `authorization` are credentials: stored encrypted, never in a response or a
				// change event (webhook and MQTT payloads, audit) after they were sent.
				// `eid` is the caller's client (filled in when omitted), another client's only for the operator.
				async beforeCreate(ctx, doc) {
					doc.eid = normalEid(typeof doc.eid === "string" ? doc.eid : String(ctx.meta.token?.cid ?? ""));
					validateValue(doc.key, doc.value);
					const client = await eidClient(ctx, doc.eid as string);
					if (isRbac(doc)) checkRbacDomains(doc.value, client);
					if (isCqrs(doc) && isObject(doc.value)) doc.value = sealCredentials((ctx.service as ContextThis).aes, doc.value);
					sealSms(ctx, doc.key, doc);
				},
				async beforePatch(ctx, set, before) {
					if ("eid" in set) {
						if (typeof set.eid !== "string") throw badRequest("eid must not be null");
						set.eid = normalEid(set.eid);
					}
					if (!before) {
						// A bulk patch: one `set` for every config in view, so nothing that depends on each one's stored value.
						if ("key" in set) throw badRequest("key cannot be set by a bulk patch of configs");
						if ("value" in set) throw badRequest("value cannot be set by a bulk patch of configs");
						if (set.eid !== undefined) await eidClient(ctx, set.eid as string);
						return;
					}
					const eid = String(set.eid ?? before.eid);
					const client = await eidClient(ctx, eid);
					if (set.key !== undefined && set.key !== before.key && holdsCredentials(before)) throw badRequest("key cannot change while the config holds credentials");
					const key = set.key ?? before.key;
					if (set.key !== undefined || set.value !== undefined) validateValue(key, set.value !== undefined ? set.value : before.value);
					if (key === "RBAC" && (set.value !== undefined || set.eid !== undefined || set.key !== undefined)) checkRbacDomains(set.value ?? before.value, client);
					sealSms(ctx, key, set, before.value);
					if (key !== "CQRS") return;
					const aes = (ctx.service as ContextThis).aes;
					if (before.key === "CQRS") {
						if (isObject(set.value)) set.value = sealCredentials(aes, set.value, before.value);
					} else {
						// Becoming a CQRS config: whatever the value holds was written as plaintext, so it is sealed now.
						const value = set.value !== undefined ? set.value : before.value;
						if (isObject(value)) set.value = sealCredentials(aes, value);
					}
				},
				// `secret` and `authorization` of a value are hidden in every config, whatever its key: the key, which a caller
				// writes, never decides (a config that becomes CQRS must not show or emit what it held as another key).
				redact(doc) {
					if (doc.key === "SMS" && isObject(doc.value)) doc = { ...doc, value: redactSmsValue(doc.value) };
					if (!isObject(doc.value) || !CREDENTIALS.some((k) => k in (doc.value as Record<string, unknown>))) return doc;
					const { secret: _s, authorization: _a, ...value } = doc.value;
					return { ...doc, value };
				},
				specials: { deliveries, redeliver },
				async afterWrite(ctx, op, before, after) {
					if (isRbac(before) || isRbac(after)) ctx.broadcast(AUTHORITY_CHANGED, {});
					if (isCqrs(before) || isCqrs(after)) {
						const eids = [...new Set([before, after].filter(isCqrs).map((d) => String(d!.eid)))];
						ctx.broadcast(CQRS_CHANGED, { eids });
					}
				},
			},
		}),
	],
	actions: {
		/** Every live RBAC configuration value (role → permission → grant expansion), for the grant index. */
		"configs.rbac": {
			visibility: "public",
			async handler(this: ContextThis) {
				const docs = await this.collectionStore("configs").find({ query: { key: "RBAC", deleted_at: null } });
				return docs.map((d) => ({ eid: d.eid, value: d.value }));
			},
		},
		/** Live `SMS` and `SMS_TEMPLATE` entries of a client, newest first, values as stored (sealed). Internal (touch). */
		"configs.touch": {
			visibility: "public",
			params: { eid: "string" },
			async handler(this: ContextThis, ctx: Context<{ eid: string }>) {
				const docs = await this.collectionStore("configs").find({
					query: { key: { $in: ["SMS", "SMS_TEMPLATE"] }, eid: ctx.params.eid, deleted_at: null },
					sort: { updated_at: -1 },
				});
				return docs.map((d) => ({ key: d.key, value: d.value }));
			},
		},
		/**
		 * The live CQRS (webhook) config of a client, or null: not deleted; an active one before an inactive one, then
		 * the most recently updated. Internal (the dispatcher); the value carries the webhook secret.
		 */
		"configs.cqrs": {
			visibility: "public",
			params: { eid: "string" },
			async handler(this: ContextThis, ctx: Context<{ eid: string }>): Promise<CqrsConfig | null> {
				const docs = await this.collectionStore("configs").find({ query: { key: "CQRS", eid: ctx.params.eid, deleted_at: null } });
				if (!docs.length) return null;
				const all = docs.map((d) => ({ c: cqrsOf(d, this.aes), at: String(d.updated_at ?? d.created_at ?? "") }));
				all.sort((a, b) => Number(b.c.active) - Number(a.c.active) || (a.at < b.at ? 1 : a.at > b.at ? -1 : 0));
				return all[0].c;
			},
		},
		/**
		 * Disables (`active: false`, with `reason`) or re-enables a CQRS config: written into its value as `active`,
		 * `disabled_at`, `disabled_reason`, with a change event like any write. Internal (dispatcher, operators).
		 */
		"configs.cqrsActive": {
			visibility: "public",
			params: { id: "string", active: "boolean", reason: { type: "string", optional: true } },
			async handler(this: ContextThis, ctx: Context<{ id: string; active: boolean; reason?: string }, RequestMeta>): Promise<CqrsConfig | null> {
				const store = this.collectionStore("configs");
				const before = await store.findOne({ id: ctx.params.id, key: "CQRS", deleted_at: null });
				if (!before) return null;
				const current = cqrsOf(before, this.aes);
				if (current.active === ctx.params.active) return current;
				// Rewritten from the stored (sealed) value, so the credentials stay encrypted.
				const { active: _a, disabled_at: _d, disabled_reason: _r, ...rest } = before.value as Record<string, unknown>;
				const value = ctx.params.active ? rest : { ...rest, active: false, disabled_at: new Date().toISOString(), disabled_reason: ctx.params.reason ?? "disabled" };
				const after = await store.setOne(before.id, { value, updated_at: new Date().toISOString() });
				if (!after) return null;
				await this.recordChanges(ctx as Ctx, "configs", [{ op: "u", before, after }]);
				return cqrsOf(after, this.aes);
			},
		},
	},
});

export default ContextService;
