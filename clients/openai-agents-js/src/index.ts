export { ITEM_KEY, toItem, toMessage } from "./items.js";
export { WindlassSession, type WindlassSessionOptions } from "./session.js";
