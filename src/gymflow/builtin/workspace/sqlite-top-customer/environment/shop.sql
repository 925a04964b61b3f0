CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT);
CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER, amount REAL);
INSERT INTO customers VALUES (1, 'Ana'), (2, 'Bo'), (3, 'Cy');
INSERT INTO orders VALUES (1, 1, 20.0), (2, 2, 50.0), (3, 1, 35.5), (4, 3, 40.0), (5, 3, 10.0);
