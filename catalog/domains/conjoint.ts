import type { DomainDef } from "../types";

export const conjoint: DomainDef = {
	name: "conjoint",
	restPort: 3130,
	grpcPort: 5130,
	description: "Messaging: accounts, channels, contacts, members, messages",
	collections: [
		{
			name: "accounts",
			description: "Messaging accounts",
			fields: { name: { type: "string", required: true, maxLength: 200 }, user: { type: "string", format: "objectId", relation: "identity/users" } },
			specials: [{ action: "generate", method: "POST", path: "generate", description: "Generate an account" }],
		},
		{ name: "channels", description: "Channels", fields: { name: { type: "string", required: true, maxLength: 200 }, type: { type: "string", enum: ["DIRECT", "GROUP", "PUBLIC"] } } },
		{ name: "contacts", description: "Contacts", fields: { name: { type: "string", required: true, maxLength: 200 }, account: { type: "string", format: "objectId", relation: "conjoint/accounts" } } },
		{
			name: "members",
			description: "Channel members",
			fields: {
				channel: { type: "string", required: true, format: "objectId", relation: "conjoint/channels" },
				account: { type: "string", required: true, format: "objectId", relation: "conjoint/accounts" },
			},
		},
		{
			name: "messages",
			description: "Messages",
			fields: {
				channel: { type: "string", required: true, format: "objectId", relation: "conjoint/channels" },
				content: { type: "string", required: true, maxLength: 20000 },
			},
			specials: [{ action: "search", method: "GET", path: "search", description: "Search messages" }],
		},
	],
};
