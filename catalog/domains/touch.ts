import type { DomainDef } from "../types";

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
				smtp: { type: "object" },
			},
			rules: [{ anyOf: ["html", "text"], message: "an email needs html or text" }],
			specials: [{ action: "send", method: "POST", path: "send", description: "Send an email" }],
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
			specials: [{ action: "send", method: "POST", path: "send", description: "Send a web push" }],
		},
		{
			name: "smss",
			description: "SMS messages",
			fields: {
				provider: { type: "string", required: true, enum: ["kavenegar", "twilio"] },
				message: { type: "string", required: true, maxLength: 2000 },
				receptors: { type: "array", items: "string", format: "e164", required: true },
				sender: { type: "string", maxLength: 100 },
				res: { type: "object" },
			},
			specials: [
				{ action: "send", method: "POST", path: "send", description: "Send an SMS" },
				{ action: "send", method: "POST", path: "send/template", description: "Send a template SMS with parameters" },
			],
		},
		{
			name: "push-histories",
			description: "Push delivery attempts, written by the platform",
			platformWritten: true,
			fields: {
				to: { type: "string", format: "objectId", relation: "touch/pushes" },
				status: { type: "string" },
				res: { type: "object" },
			},
		},
	],
};
