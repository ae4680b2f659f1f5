# Generates tools.json for the SelectTools measurement. Kept for reference; the JSON is the test
# input. Each tool: name, group, description, properties {name: (type, description)}, required.
import json

T = []
def tool(group, name, desc, props, required=()):
    T.append(dict(group=group, name=name, description=desc, props=props, required=list(required)))

S, I, N, B = "string", "integer", "number", "boolean"

# travel
tool("travel", "search_flights", "Search for flights between two airports or cities on a date. Returns options with airline, departure and arrival times, stops and price.",
     {"origin": (S, "Departure city or IATA airport code"), "destination": (S, "Arrival city or IATA airport code"), "date": (S, "Departure date, YYYY-MM-DD"), "return_date": (S, "Return date for round trips, YYYY-MM-DD"), "passengers": (I, "Number of travellers"), "cabin": (S, "economy, premium, business or first")}, ["origin", "destination", "date"])
tool("travel", "book_flight", "Book a flight option returned by search_flights for the given passengers and pay for the ticket.",
     {"option_id": (S, "Flight option id from search_flights"), "passenger_names": ("array", "Full names of the passengers"), "seat_preference": (S, "window, aisle or none")}, ["option_id", "passenger_names"])
tool("travel", "cancel_booking", "Cancel a flight, hotel or car reservation by its booking reference and report the refund.",
     {"booking_reference": (S, "Booking reference or confirmation code"), "reason": (S, "Why the trip is cancelled")}, ["booking_reference"])
tool("travel", "search_hotels", "Find hotels in a city for check-in and check-out dates, with nightly price, rating and distance to the center.",
     {"city": (S, "City or neighbourhood"), "check_in": (S, "YYYY-MM-DD"), "check_out": (S, "YYYY-MM-DD"), "guests": (I, "Number of guests"), "max_price": (N, "Highest nightly price")}, ["city", "check_in", "check_out"])
tool("travel", "book_hotel", "Reserve a hotel room from search_hotels results.",
     {"hotel_id": (S, "Hotel id from search_hotels"), "room_type": (S, "single, double or suite"), "guest_name": (S, "Name on the reservation")}, ["hotel_id", "guest_name"])
tool("travel", "get_itinerary", "Show the traveller's upcoming trips: flights, hotels and car rentals with their booking references.",
     {"trip_id": (S, "A specific trip; empty for all upcoming trips")})
tool("travel", "rent_car", "Rent a car at a pick-up location for a period, with car class and daily price.",
     {"pickup_location": (S, "Airport or city where the car is picked up"), "pickup_date": (S, "YYYY-MM-DD"), "return_date": (S, "YYYY-MM-DD"), "car_class": (S, "economy, compact, SUV or van")}, ["pickup_location", "pickup_date", "return_date"])
tool("travel", "check_flight_status", "Live status of a flight by flight number: on time, delayed, gate and terminal.",
     {"flight_number": (S, "Airline code and number, for example AF123"), "date": (S, "YYYY-MM-DD, default today")}, ["flight_number"])

# weather
tool("weather", "get_current_weather", "Current weather conditions for a location: temperature, feels-like, humidity, wind and sky.",
     {"location": (S, "City name or coordinates"), "units": (S, "metric or imperial")}, ["location"])
tool("weather", "get_forecast", "Weather forecast for a location for the coming days: daily high and low temperature, chance of rain or snow, wind.",
     {"location": (S, "City name or coordinates"), "days": (I, "Number of days, 1 to 14"), "units": (S, "metric or imperial")}, ["location"])
tool("weather", "get_air_quality", "Air quality index (AQI) and pollutant levels (PM2.5, ozone) for a location.",
     {"location": (S, "City name or coordinates")}, ["location"])
tool("weather", "get_uv_index", "Ultraviolet (UV) index forecast for a location, with sunburn risk.",
     {"location": (S, "City name or coordinates"), "date": (S, "YYYY-MM-DD")}, ["location"])
tool("weather", "get_weather_alerts", "Active severe weather alerts and warnings (storms, floods, heat waves) for a region.",
     {"region": (S, "City, state or country")}, ["region"])
tool("weather", "get_sunrise_sunset", "Sunrise and sunset times and day length for a location and date.",
     {"location": (S, "City name or coordinates"), "date": (S, "YYYY-MM-DD")}, ["location"])
tool("weather", "get_historical_weather", "Past weather for a location on a date: recorded temperatures and precipitation.",
     {"location": (S, "City name or coordinates"), "date": (S, "YYYY-MM-DD in the past")}, ["location", "date"])
tool("weather", "get_pollen_count", "Pollen levels (tree, grass, weed) for allergy sufferers at a location.",
     {"location": (S, "City name or coordinates")}, ["location"])

# calendar
tool("calendar", "create_event", "Create a calendar event or meeting with a title, start and end time, location and attendees.",
     {"title": (S, "Event title"), "start": (S, "Start date-time, ISO 8601"), "end": (S, "End date-time, ISO 8601"), "location": (S, "Where it takes place"), "attendees": ("array", "Email addresses to invite")}, ["title", "start"])
tool("calendar", "list_events", "List calendar events and meetings in a time range, for example today or next week.",
     {"from": (S, "Start of the range, ISO 8601"), "to": (S, "End of the range, ISO 8601"), "calendar_id": (S, "Which calendar; default primary")})
tool("calendar", "update_event", "Change an existing calendar event: move it to another time, rename it or change its location.",
     {"event_id": (S, "Event id from list_events"), "start": (S, "New start"), "end": (S, "New end"), "title": (S, "New title")}, ["event_id"])
tool("calendar", "delete_event", "Delete or cancel a calendar event and notify its attendees.",
     {"event_id": (S, "Event id from list_events"), "notify": (B, "Send cancellation notices")}, ["event_id"])
tool("calendar", "find_free_slots", "Find free time slots when all given people are available for a meeting of a given length.",
     {"participants": ("array", "Email addresses"), "duration_minutes": (I, "Meeting length"), "within_days": (I, "Search the next N days")}, ["participants", "duration_minutes"])
tool("calendar", "invite_attendees", "Add people to an existing calendar event and send them invitations.",
     {"event_id": (S, "Event id"), "attendees": ("array", "Email addresses to invite")}, ["event_id", "attendees"])
tool("calendar", "set_reminder", "Set a reminder notification at a time, optionally tied to a calendar event.",
     {"text": (S, "What to be reminded of"), "at": (S, "When, ISO 8601"), "event_id": (S, "Optional related event")}, ["text", "at"])
tool("calendar", "list_calendars", "List the user's calendars (work, personal, shared) with their ids.", {})

# email
tool("email", "send_email", "Send an email message to one or more recipients with a subject and body, optionally with attachments.",
     {"to": ("array", "Recipient email addresses"), "subject": (S, "Subject line"), "body": (S, "Message text"), "attachments": ("array", "File ids to attach")}, ["to", "subject", "body"])
tool("email", "search_emails", "Search the mailbox for messages by sender, subject words, date or label.",
     {"query": (S, "Words to look for"), "from": (S, "Sender address"), "after": (S, "YYYY-MM-DD"), "label": (S, "Mailbox label")}, ["query"])
tool("email", "read_email", "Open one email message by id and return its full text and attachments list.",
     {"message_id": (S, "Message id from search_emails or list_unread")}, ["message_id"])
tool("email", "reply_email", "Reply to an email message, keeping the thread, optionally replying to all recipients.",
     {"message_id": (S, "Message to reply to"), "body": (S, "Reply text"), "reply_all": (B, "Reply to everyone")}, ["message_id", "body"])
tool("email", "forward_email", "Forward an email message to other recipients with an optional note.",
     {"message_id": (S, "Message to forward"), "to": ("array", "Recipients"), "note": (S, "Text added above")}, ["message_id", "to"])
tool("email", "list_unread", "List unread email messages in the inbox, newest first.",
     {"limit": (I, "How many")})
tool("email", "archive_email", "Archive email messages so they leave the inbox.",
     {"message_ids": ("array", "Messages to archive")}, ["message_ids"])
tool("email", "create_draft", "Save an email draft to finish and send later.",
     {"to": ("array", "Recipients"), "subject": (S, "Subject"), "body": (S, "Text")}, ["body"])

# shopping
tool("shopping", "search_products", "Search the online store catalogue for products by keywords, with price, rating and stock.",
     {"query": (S, "Product keywords"), "max_price": (N, "Price limit"), "category": (S, "Department"), "sort": (S, "relevance, price or rating")}, ["query"])
tool("shopping", "add_to_cart", "Add a product to the shopping cart in a quantity.",
     {"product_id": (S, "Product id from search_products"), "quantity": (I, "How many")}, ["product_id"])
tool("shopping", "view_cart", "Show the shopping cart: items, quantities and total price.", {})
tool("shopping", "remove_from_cart", "Remove a product from the shopping cart.",
     {"product_id": (S, "Product id")}, ["product_id"])
tool("shopping", "checkout_order", "Place the order for everything in the shopping cart and pay with the saved payment method.",
     {"shipping_address_id": (S, "Saved address"), "delivery_speed": (S, "standard or express")})
tool("shopping", "track_order", "Track the delivery of an order: carrier, shipping status and estimated arrival.",
     {"order_id": (S, "Order number")}, ["order_id"])
tool("shopping", "list_orders", "List past orders with dates, items and totals.",
     {"since": (S, "YYYY-MM-DD")})
tool("shopping", "return_item", "Start a return or refund for an item of a delivered order and get a return label.",
     {"order_id": (S, "Order number"), "product_id": (S, "Item to return"), "reason": (S, "Why it is returned")}, ["order_id", "product_id"])

# finance
tool("finance", "get_account_balance", "Current balance of the user's bank accounts (checking, savings, credit card).",
     {"account_id": (S, "A specific account; empty for all")})
tool("finance", "list_transactions", "List bank account transactions (payments, deposits, card purchases) in a date range.",
     {"account_id": (S, "Account"), "from": (S, "YYYY-MM-DD"), "to": (S, "YYYY-MM-DD"), "min_amount": (N, "Smallest amount")})
tool("finance", "transfer_money", "Transfer money between the user's accounts or to a saved payee (bank transfer).",
     {"from_account": (S, "Source account"), "to": (S, "Destination account or payee"), "amount": (N, "Amount"), "currency": (S, "ISO currency code")}, ["from_account", "to", "amount"])
tool("finance", "pay_bill", "Pay a utility, phone or credit card bill from an account.",
     {"biller": (S, "Who is paid"), "amount": (N, "Amount"), "account_id": (S, "Account to pay from")}, ["biller", "amount"])
tool("finance", "get_exchange_rate", "Currency exchange rate between two currencies and a converted amount.",
     {"from_currency": (S, "ISO code, e.g. EUR"), "to_currency": (S, "ISO code, e.g. JPY"), "amount": (N, "Amount to convert")}, ["from_currency", "to_currency"])
tool("finance", "get_stock_quote", "Latest share price, daily change and volume of a stock by ticker symbol.",
     {"symbol": (S, "Ticker, e.g. AAPL")}, ["symbol"])
tool("finance", "create_budget", "Create a monthly spending budget for a category with a limit and alerts.",
     {"category": (S, "groceries, dining, transport, ..."), "monthly_limit": (N, "Limit per month")}, ["category", "monthly_limit"])
tool("finance", "categorize_expenses", "Summarize spending by category (groceries, restaurants, rent) for a month.",
     {"month": (S, "YYYY-MM")}, ["month"])

# files
tool("files", "search_files", "Search the user's drive for files and folders by name or content.",
     {"query": (S, "Words in the name or content"), "type": (S, "document, spreadsheet, pdf, image")}, ["query"])
tool("files", "read_file", "Read the text content of a file in the drive.",
     {"file_id": (S, "File id from search_files")}, ["file_id"])
tool("files", "write_file", "Create a new file or overwrite a file in the drive with text content.",
     {"path": (S, "Folder and file name"), "content": (S, "Text to write")}, ["path", "content"])
tool("files", "list_directory", "List the files and subfolders of a folder in the drive.",
     {"path": (S, "Folder path; default the root")})
tool("files", "share_file", "Share a file or folder with people by email, as viewer or editor, or create a share link.",
     {"file_id": (S, "File id"), "emails": ("array", "People to share with"), "role": (S, "viewer or editor")}, ["file_id"])
tool("files", "delete_file", "Move a file or folder in the drive to the trash.",
     {"file_id": (S, "File id")}, ["file_id"])
tool("files", "convert_document", "Convert a document to another format, such as Word to PDF or spreadsheet to CSV.",
     {"file_id": (S, "File id"), "target_format": (S, "pdf, docx, csv, txt")}, ["file_id", "target_format"])
tool("files", "summarize_document", "Summarize a long document or PDF in the drive into key points.",
     {"file_id": (S, "File id"), "max_points": (I, "Number of key points")}, ["file_id"])

# devops
tool("devops", "list_pull_requests", "List open pull requests of a GitHub repository with author, status and review state.",
     {"repo": (S, "owner/name"), "state": (S, "open, closed or all")}, ["repo"])
tool("devops", "create_issue", "Open a new issue in a GitHub repository with a title, description and labels.",
     {"repo": (S, "owner/name"), "title": (S, "Issue title"), "body": (S, "Description"), "labels": ("array", "Labels")}, ["repo", "title"])
tool("devops", "get_ci_status", "Status of the CI pipeline (build and tests) for a branch or commit.",
     {"repo": (S, "owner/name"), "branch": (S, "Branch name, default main")}, ["repo"])
tool("devops", "deploy_service", "Deploy a version of a service to an environment (staging or production).",
     {"service": (S, "Service name"), "version": (S, "Image tag or git sha"), "environment": (S, "staging or production")}, ["service", "version", "environment"])
tool("devops", "rollback_deployment", "Roll a service back to its previous deployed version in an environment.",
     {"service": (S, "Service name"), "environment": (S, "staging or production")}, ["service", "environment"])
tool("devops", "get_service_logs", "Fetch recent log lines of a service, filtered by level or text, to debug errors.",
     {"service": (S, "Service name"), "since_minutes": (I, "How far back"), "level": (S, "error, warn, info")}, ["service"])
tool("devops", "restart_service", "Restart the pods or instances of a service in an environment.",
     {"service": (S, "Service name"), "environment": (S, "staging or production")}, ["service", "environment"])
tool("devops", "get_metrics", "Service metrics over time: request rate, error rate, latency percentiles, CPU and memory.",
     {"service": (S, "Service name"), "metric": (S, "requests, errors, latency, cpu, memory"), "window_minutes": (I, "Time window")}, ["service"])

out = []
for t in T:
    props = {}
    for k, (typ, d) in t["props"].items():
        if typ == "array":
            props[k] = {"type": "array", "items": {"type": "string"}, "description": d}
        else:
            props[k] = {"type": typ, "description": d}
    schema = {"type": "object", "properties": props, "additionalProperties": False}
    if t["required"]:
        schema["required"] = t["required"]
    out.append({"name": t["name"], "description": t["description"], "groups": [t["group"]], "input_schema": schema})
json.dump(out, open("tools.json", "w"), indent=1)
print(len(out), "tools,", len({t["group"] for t in T}), "groups")
