export { fromChatMessage, METADATA, toChatMessage } from "./convert.js";
export { WindlassChatMessageHistory, type WindlassChatMessageHistoryInput } from "./history.js";
