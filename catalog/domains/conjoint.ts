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
			specials: [
				{
					action: "generate",
					method: "POST",
					path: "generate",
					implemented: true,
					description:
						"The caller's messaging account, created on the first call (one per user, or per app or client for their tokens): owner the caller, `user` its user id; a later call answers the same account (409 when it is soft-deleted: restore it)",
					body: { name: { type: "string", maxLength: 200, description: "Name of a new account (default: the caller's id)" } },
					answer: "data",
					errors: [404, 409],
				},
			],
		},
		{
			name: "channels",
			description: "Channels",
			fields: { name: { type: "string", required: true, maxLength: 200 }, type: { type: "string", enum: ["DIRECT", "GROUP", "PUBLIC"] } },
		},
		{
			name: "contacts",
			description: "Contacts",
			fields: { name: { type: "string", required: true, maxLength: 200 }, account: { type: "string", format: "objectId", relation: "conjoint/accounts" } },
		},
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
			specials: [
				{
					action: "search",
					method: "GET",
					path: "search",
					implemented: true,
					description:
						"Search messages: the caller's view (zones, grant rows and fields, `query`), ranked by relevance of `q` to the text fields the caller may read (whole words; the last word also as a prefix), best first, each with its `score`",
					query: { q: { type: "string", required: true, maxLength: 200, description: "The text to search for" } },
					listParams: true,
					answer: "items",
					answerFields: { score: { type: "number", description: "Relevance (BM25); higher is better" } },
				},
			],
		},
	],
};
