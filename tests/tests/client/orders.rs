//! The Store through the typed client, against the real server on both
//! backends: `place_order_once` places an order once however often it is
//! sent, and stops at an answer no retry can change; `walk_orders` sees
//! every order once and in id order, by status and by animal, at any page
//! size; `update_order` and `get_inventory` agree with it.

use futures::TryStreamExt;
use petstore_client::{Order, OrderStatus, OrderUpdateStatus, PetStatus};
use petstore_tests::on_every_backend;

use super::{client, create, error_response, invalid_request};

/// Orders per walk: more than one page of the largest size.
const ORDERS: usize = 130;

on_every_backend! {
    async fn orders_are_placed_once_and_walked_once_in_order(server) {
        let client = client(&server);
        let mut orders: Vec<Order> = Vec::new();
        for i in 0..ORDERS {
            let pet = create(&client, &format!("for-sale-{i}"), 1, Some(PetStatus::Available)).await;
            let key = format!("walk-{i}");
            let placed = client.place_order_once(pet.id).idempotency_key(&key).send().await.unwrap();
            assert!(!placed.replayed);
            assert_eq!(placed.attempts, 1);
            // Sent again with its key: the same order, replayed, no second one.
            let again = client.place_order_once(pet.id).idempotency_key(&key).send().await.unwrap();
            assert!(again.replayed);
            assert_eq!(again.order, placed.order);
            orders.push(placed.order);
        }
        // Every third delivered, every third but one cancelled.
        for (i, order) in orders.iter_mut().enumerate() {
            let to = match i % 3 {
                0 => OrderUpdateStatus::Delivered,
                1 => OrderUpdateStatus::Cancelled,
                _ => continue,
            };
            let updated = client
                .update_order()
                .order_id(order.id)
                .body(petstore_client::OrderUpdate::builder().status(to))
                .send()
                .await
                .unwrap()
                .into_inner();
            assert_eq!((updated.id, updated.pet_id), (order.id, order.pet_id));
            *order = updated;
        }

        for page_size in [100, 7] {
            let seen: Vec<Order> = client
                .walk_orders()
                .page_size(page_size)
                .stream()
                .try_collect()
                .await
                .unwrap();
            assert_eq!(seen, orders, "page size {page_size}");
        }
        for status in [OrderStatus::Placed, OrderStatus::Delivered, OrderStatus::Cancelled] {
            let expected: Vec<Order> =
                orders.iter().filter(|o| o.status == status).cloned().collect();
            let seen: Vec<Order> = client
                .walk_orders()
                .status(status)
                .page_size(9)
                .stream()
                .try_collect()
                .await
                .unwrap();
            assert_eq!(seen, expected, "{status:?}");
        }
        let one = &orders[ORDERS / 2];
        let seen: Vec<Order> =
            client.walk_orders().pet_id(one.pet_id).stream().try_collect().await.unwrap();
        assert_eq!(seen, vec![one.clone()]);

        let inventory = client.get_inventory().send().await.unwrap().into_inner();
        let count = |status| orders.iter().filter(|o| o.status == status).count() as i64;
        assert_eq!(inventory.pending, count(OrderStatus::Placed));
        assert_eq!(inventory.sold, count(OrderStatus::Delivered));
        assert_eq!(inventory.available, count(OrderStatus::Cancelled));
    }

    async fn placing_once_stops_at_an_answer_no_retry_can_change(server) {
        let client = client(&server);
        let sold = create(&client, "sold", 1, Some(PetStatus::Sold)).await;
        let taken = client.place_order_once(sold.id).send().await;
        error_response(taken, 409, "pet_not_available");
        let missing = client.place_order_once(sold.id + 1_000_000).send().await;
        error_response(missing, 422, "pet_not_found");
        // A key the contract does not allow is refused before anything is sent.
        let bad_key = client.place_order_once(sold.id).idempotency_key("").send().await;
        assert!(invalid_request(bad_key).contains("idempotency_key"));
    }
}
