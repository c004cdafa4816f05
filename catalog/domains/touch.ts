import type { DomainDef, FieldDef } from "../types";

/** What the platform keeps about the delivery of an email or SMS (set by the platform only). */
const DELIVERY_FIELDS: Record<string, FieldDef> = {
	state: { type: "string", enum: ["QUEUED", "SENDING", "SENT", "FAILED"], readOnly: true, description: "Delivery state (docs/communications.md)" },
	sent_at: { type: "date", readOnly: true },
	attempts: { type: "integer", readOnly: true, description: "Delivery attempts made so far" },
	next_at: { type: "date", readOnly: true, description: "When the next delivery attempt is due" },
	reason: { type: "string", readOnly: true, description: "Why the last attempt failed (`no transport`, provider answer)" },
	lease: { type: "string", internal: true },
	lease_until: { type: "date", internal: true },
};

/** A send's body: the collection's settable fields (the record it creates), set below from the definitions. */
const SEND_BODY: Record<"emails" | "smss", Record<string, FieldDef>> = { emails: {}, smss: {} };

export const touch: DomainDef = {
	name: "touch",
	restPort: 3100,
	grpcPort: 5100,
	description: "Outbound communications: email, notices, web push, SMS",
	collections: [
		{
			name: "emails",
			description: "Emails; a create or send may trigger real delivery",
			fields: {
				provider: { type: "string", required: true, enum: ["nodemailer"] },
				to: { type: "array", items: "string", format: "email", required: true },
				from: { type: "string", required: true, maxLength: 500 },
				subject: { type: "string", required: true, maxLength: 1000 },
				html: { type: "string" },
				text: { type: "string" },
				cc: { type: "array", items: "string", format: "email" },
				bcc: { type: "array", items: "string", format: "email" },
				reply_to: { type: "array", items: "string", format: "email" },
				date: { type: "date" },
				attachments: { type: "array", items: "string", format: "objectId", fileRef: true },
				smtp: { type: "object", readOnly: true, description: "Delivery metadata: message_id, accepted, rejected, response" },
				...DELIVERY_FIELDS,
			},
			rules: [{ anyOf: ["html", "text"], message: "an email needs html or text" }],
			specials: [
				{
					action: "send",
					method: "POST",
					path: "send",
					implemented: true,
					description: "Record an email and queue it for delivery over SMTP (a future `date` schedules it); answers once queued, `state: QUEUED`",
					body: SEND_BODY.emails,
					answer: "data",
				},
			],
		},
		{
			name: "notices",
			description: "In-app notices",
			fields: {
				type: { type: "string", required: true, enum: ["INFO", "EVENT", "ALERT", "WARNING", "ERROR", "SUCCESS", "NOTICE", "MESSAGE"] },
				title: { type: "string", required: true, maxLength: 1000 },
				content: { type: "string", required: true },
				subtitle: { type: "string", maxLength: 1000 },
				category: { type: "string", maxLength: 200 },
				visited: { type: "boolean" },
				thumbnail: { type: "string", format: "objectId", fileRef: true },
				attachments: { type: "array", items: "string", format: "objectId", fileRef: true },
				actions: { type: "array", items: "object" },
			},
		},
		{
			name: "pushes",
			description: "Web push subscription targets",
			fields: {
				session: { type: "string", required: true, format: "objectId" },
				keys: { type: "object", required: true, writeOnly: true },
				endpoint: { type: "string", required: true, format: "uri" },
				expiration: { type: "number", required: true },
			},
			specials: [
				{
					action: "send",
					method: "POST",
					path: "send",
					implemented: true,
					description: "Queue a Web Push message to the named subscription (`push`) or to every subscription of a session: one push-histories record per target",
					body: {
						push: { type: "string", format: "objectId", description: "A subscription (touch/pushes id) of the caller's view" },
						session: { type: "string", format: "objectId", description: "Every subscription of this session" },
						title: { type: "string", required: true, maxLength: 1000 },
						body: { type: "string", required: true, maxLength: 3000 },
						url: { type: "string", format: "uri", description: "Opened when the notification is clicked" },
						data: { type: "object", description: "Free-form data for the service worker" },
					},
					answer: "data-items:touch/push-histories",
					errors: [404],
				},
				{
					action: "read",
					method: "GET",
					path: "vapid",
					implemented: true,
					description: "The VAPID public key (applicationServerKey) browsers subscribe with",
					answer: "data:object",
					answerFields: { public_key: { type: "string", description: "Base64url P-256 public key" } },
				},
			],
		},
		{
			name: "smss",
			description: "SMS messages",
			fields: {
				provider: { type: "string", required: true, enum: ["kavenegar", "twilio"] },
				message: { type: "string", required: true, maxLength: 2000 },
				receptors: { type: "array", items: "string", format: "e164", required: true },
				sender: { type: "string", maxLength: 100 },
				date: { type: "date", description: "Scheduled send time (like an email's `date`)" },
				res: { type: "object", readOnly: true, description: "The provider's answer (without credentials)" },
				template: { type: "string", readOnly: true, description: "Name of the SMS_TEMPLATE the message was filled from" },
				...DELIVERY_FIELDS,
			},
			specials: [
				{
					action: "send",
					method: "POST",
					path: "send",
					implemented: true,
					description: "Record an SMS and queue it for delivery through the named provider (`kavenegar`, `twilio`)",
					body: SEND_BODY.smss,
					answer: "data",
				},
				{
					action: "send",
					method: "POST",
					path: "send/template",
					implemented: true,
					description: "Fill a tenant's SMS_TEMPLATE config entry with `params` and queue it like a send",
					body: {
						provider: { type: "string", required: true, enum: ["kavenegar", "twilio"] },
						receptors: { type: "array", items: "string", format: "e164", required: true },
						template: { type: "string", required: true, maxLength: 200, description: "`name` of an SMS_TEMPLATE config entry of the caller's client" },
						params: { type: "object", description: "Values of the template's `{{param}}` slots" },
						sender: { type: "string", maxLength: 100 },
					},
					answer: "data",
					errors: [404],
				},
			],
		},
		{
			name: "push-histories",
			description: "Push delivery attempts, written by the platform",
			platformWritten: true,
			fields: {
				to: { type: "string", format: "objectId", relation: "touch/pushes" },
				status: { type: "string", enum: ["QUEUED", "SENDING", "SENT", "FAILED", "RETRIED", "GONE"], description: "This attempt's outcome (docs/communications.md)" },
				res: { type: "object", description: "The push service's answer: status and body" },
				session: { type: "string", format: "objectId" },
				message: { type: "object", description: "title, body, url, data" },
				attempt: { type: "integer", description: "1 for the first attempt of a message to this subscription" },
				next_at: { type: "date" },
				sent_at: { type: "date" },
				reason: { type: "string" },
				lease: { type: "string", internal: true },
				lease_until: { type: "date", internal: true },
			},
		},
	],
};

for (const name of ["emails", "smss"] as const) {
	const fields = touch.collections.find((c) => c.name === name)!.fields;
	for (const [k, def] of Object.entries(fields)) if (!def.internal && !def.readOnly) SEND_BODY[name][k] = def;
}
