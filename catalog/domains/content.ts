import type { DomainDef } from "../types";

export const content: DomainDef = {
	name: "content",
	restPort: 3110,
	grpcPort: 5110,
	description: "Notes, posts and tickets",
	collections: [
		{ name: "notes", description: "Notes", fields: { title: { type: "string", required: true, maxLength: 1000 }, content: { type: "string" } } },
		{
			name: "posts",
			description: "Posts",
			fields: { title: { type: "string", required: true, maxLength: 1000 }, content: { type: "string" }, status: { type: "string", enum: ["DRAFT", "PUBLISHED"] } },
			specials: [{ action: "search", method: "GET", path: "search", description: "Search posts" }],
		},
		{
			name: "tickets",
			description: "Support tickets",
			fields: { title: { type: "string", required: true, maxLength: 1000 }, content: { type: "string" }, status: { type: "string", enum: ["OPEN", "PENDING", "CLOSED"] } },
		},
	],
};
