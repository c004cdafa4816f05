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
			specials: [
				{
					action: "search",
					method: "GET",
					path: "search",
					implemented: true,
					description:
						"Search posts: the caller's view (zones, grant rows and fields, `query`), ranked by relevance of `q` to the text fields the caller may read (whole words; the last word also as a prefix), best first, each with its `score`",
					query: { q: { type: "string", required: true, maxLength: 200, description: "The text to search for" } },
					listParams: true,
					answer: "items",
					answerFields: { score: { type: "number", description: "Relevance (BM25); higher is better" } },
				},
			],
		},
		{
			name: "tickets",
			description: "Support tickets",
			fields: { title: { type: "string", required: true, maxLength: 1000 }, content: { type: "string" }, status: { type: "string", enum: ["OPEN", "PENDING", "CLOSED"] } },
		},
	],
};
