/* zklock--1.1--1.2.sql */

\echo Use "ALTER EXTENSION zklock UPDATE TO '1.2'" to load this file. \quit
