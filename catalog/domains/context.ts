import type { DomainDef, FieldDef } from "../types";

/** A webhook delivery as its routes answer it (the dispatcher's record, without payload, URL or lease). */
const DELIVERY_FIELDS: Record<string, FieldDef> = {
	id: { type: "string", description: "The delivery's id (digits)", example: "42" },
	topic: { type: "string", description: "`<service>.<collection>` of the change", example: "content.notes" },
	op: { type: "string", enum: ["c", "u", "d", "r"], description: "The change: create, update, delete, restore" },
	document_id: { type: "string", description: "The changed document's id" },
	status: { type: "string", enum: ["pending", "delivered", "failed", "disabled"] },
	attempts: { type: "integer", minimum: 0, description: "Attempts since it was queued or last redelivered" },
	next_at: { type: "date", description: "When a pending delivery is tried next" },
	last_status: { type: "integer", description: "HTTP status of the last attempt (null: none, or no answer)" },
	last_error: { type: "string", description: "Why the last attempt failed, or why the delivery ended" },
	created_at: { type: "date" },
	delivered_at: { type: "date", description: "When the webhook answered 2xx (null until then)" },
};

export const context: DomainDef = {
	name: "context",
	restPort: 3040,
	grpcPort: 5040,
	description: "Application configuration and preferences",
	collections: [
		{
			name: "configs",
			description: "Configuration entries (CQRS webhooks, RBAC roles, ...)",
			fields: {
				key: { type: "string", required: true, maxLength: 100, description: "CQRS, RBAC or an application key" },
				// Not required: omitted, the caller's client is filled in (docs/contracts.md "Tenants").
				eid: { type: "string", description: "Id of the owning client: the caller's client (filled in when omitted); another client's only for the operator" },
				value: { type: "any", required: true, description: "Object or array" },
			},
			specials: [
				{
					action: "read",
					method: "GET",
					path: ":id/deliveries",
					implemented: true,
					description:
						'The webhook deliveries of a CQRS config, newest first (docs/webhooks.md, "Deliveries over the API"): one per change event of the config\'s client, with its state; never the payload. `next` is the `before` of the next page (null: no more)',
					query: {
						status: { type: "string", enum: ["pending", "delivered", "failed", "disabled"], description: "Only deliveries in this state" },
						before: { type: "string", description: "A delivery id (the previous page's `next`): only older deliveries" },
						limit: { type: "integer", minimum: 1, description: "Deliveries per page, 1 to 100 (default 20)" },
					},
					answer: "page:object",
					answerFields: DELIVERY_FIELDS,
					errors: [404],
				},
				{
					action: "write",
					method: "POST",
					path: ":id/deliveries/:delivery/redeliver",
					name: "redeliver",
					implemented: true,
					description:
						"Sends a failed or disabled delivery of the config again, with a fresh retry schedule, to the client's current webhook (re-enabled if it was disabled); 409 for a delivery in another state",
					answer: "data:object",
					answerFields: DELIVERY_FIELDS,
					errors: [404, 409],
				},
			],
		},
		{
			name: "settings",
			description: "User or tenant preferences",
			fields: {
				key: { type: "string", required: true, maxLength: 100 },
				value: { type: "any" },
			},
		},
	],
};
