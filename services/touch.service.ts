/**
 * touch: the standard collection pattern on every collection of the domain (catalog/domains/touch.ts), plus what
 * communications need (docs/communications.md): emails and SMS are queued for delivery as they are created (a future
 * `date` schedules an email), push subscription `keys` are sealed at rest, and the internal delivery actions the
 * publisher's delivery engine claims and settles records through (services/touch/delivery.ts). The send operations
 * are the functions of services/touch/send.ts, routed as special actions.
 */
import type { ServiceSchema } from "moleculer";
import { touch } from "../catalog/domains/touch";
import { collectionMixin } from "../engine/collection.mixin";
import { sealPushKeys } from "../lib/touch";
import { deliveryActions, deliveryState, type TouchThis } from "./touch/delivery";
import { asSchema } from "../lib/service";
import type { AccessPlan } from "../lib/plan";
import { checkAttachments, checkSender, queuedFields, sendEmail, sendPush, sendSms, sendSmsTemplate, vapidPublicKey } from "./touch/send";

const queue = {
	beforeCreate(_ctx: unknown, doc: Record<string, unknown>) {
		Object.assign(doc, queuedFields(doc.date));
	},
	// A new `date` on a queued message reschedules it.
	beforePatch(_ctx: unknown, set: Record<string, unknown>, before: Record<string, unknown> | null) {
		if (typeof set.date === "string" && before?.state === "QUEUED") set.next_at = queuedFields(set.date).next_at;
	},
};

const TouchService: ServiceSchema = asSchema<TouchThis>({
	name: "touch",
	mixins: [
		collectionMixin(touch, {
			emails: {
				specials: { send: (ctx) => sendEmail(ctx, ctx.params.body) },
				// `from` stays at a domain of the email's tenant (or a sender the platform allows), and every attachment is a
				// file the caller can GET: create, bulk, patch.
				async beforeCreate(ctx, doc) {
					await checkSender(ctx, (doc.clients as string[])[0], doc.from);
					await checkAttachments(ctx, doc.attachments);
					queue.beforeCreate(ctx, doc);
				},
				async beforePatch(ctx, set, before) {
					const tenant = before ? (before.clients as string[])[0] : ((ctx.locals?.plan as AccessPlan | undefined)?.token?.cid ?? ctx.meta.token?.cid);
					await checkSender(ctx, tenant, set.from);
					await checkAttachments(ctx, set.attachments);
					queue.beforePatch(ctx, set, before);
				},
			},
			smss: { ...queue, specials: { send: (ctx) => sendSms(ctx, ctx.params.body), "send/template": (ctx) => sendSmsTemplate(ctx, ctx.params.body) } },
			pushes: {
				specials: { send: (ctx) => sendPush(ctx, ctx.params.body), vapid: async (ctx) => vapidPublicKey(ctx) },
				// The subscription's keys encrypt every message to it: sealed at rest (AES), never returned (write-only).
				beforeCreate(ctx, doc) {
					doc.keys = sealPushKeys((ctx.service as TouchThis).aes, doc.keys);
				},
				beforePatch(ctx, set) {
					if (set.keys !== undefined) set.keys = sealPushKeys((ctx.service as TouchThis).aes, set.keys);
				},
			},
		}),
	],
	actions: deliveryActions() as ServiceSchema["actions"],
	created(this: TouchThis) {
		deliveryState(this);
	},
});

export default TouchService;
